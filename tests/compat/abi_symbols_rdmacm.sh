#!/usr/bin/env bash
# abi_symbols_rdmacm.sh BUILD_DIR
#
# abi_symbols.sh for librdmacm.so.1: every name of rdma-core 44's
# librdmacm.so.1 (68, ABI.md §1) under the same version node, and the
# node chain RDMACM_1.0 <- 1.1 <- 1.2 <- 1.3. Exit 0 / 1 / 77 (skipped).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SOFTRNIC_ABI_LIB=librdmacm.so.1 exec bash "$here/abi_symbols.sh" "$@"

#!/usr/bin/env bash
# Build the wire fuzzers with clang and run them for SECONDS (default 20)
# in all, after 3 s of the datagram CM's decoder (tests/fuzz/fuzz_sidr.c),
# 3 s of the Ethernet frame parser (tests/fuzz/fuzz_eth.c) and 3 s of the
# same-host rings (tests/fuzz/fuzz_shm_ring.c): the UD datagram decoder (tests/fuzz/fuzz_ud.c) for a quarter of
# the time (at least 5 s), then the iWARP decoders (tests/fuzz/fuzz_wire.c)
# for the rest, each from a small seed corpus that this script writes.
#
#   tests/fuzz/run.sh [SECONDS]
#
# FUZZ_BUILD (default <repo>/build-fuzz) is the build tree; the corpus that
# libFuzzer grows stays there, under fuzz-corpus/, for the next run. A
# crashing input is saved under fuzz-artifacts/ and the exit status is
# non-zero.
set -euo pipefail

secs=${1:-20}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${FUZZ_BUILD:-$root/build-fuzz}
corpus=$build/fuzz-corpus/wire
artifacts=$build/fuzz-artifacts
dict=$build/fuzz-wire.dict

cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DSOFTRNIC_FUZZ=ON \
	-DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"${JOBS:-2}" --target fuzz_wire fuzz_ud fuzz_sidr fuzz_eth fuzz_shm_ring

# The datagram CM's request and reply (src/cm/cm_sidr.h): 3 s.
sidr_corpus=$build/fuzz-corpus/sidr
mkdir -p "$sidr_corpus" "$artifacts"
printf 'SC\x01\x01\x01\x02\x03\x04\x00\x12\x34\x56\x01\x23\x45\x67\x00\x02\x00\x00hi' \
	>"$sidr_corpus/seed-req"
printf 'SC\x01\x02\x01\x02\x03\x04\x00\x00\x00\x07\x01\x23\x45\x67\x02\x00\x00\x00' \
	>"$sidr_corpus/seed-rej"
"$build/bin/fuzz_sidr" -max_total_time=3 -max_len=256 -timeout=10 \
	-print_final_stats=1 -artifact_prefix="$artifacts/" "$sidr_corpus"

# Raw packet QP frames (src/wire/eth.h): 3 s, from an IPv4/UDP frame
# with a VLAN tag and an IPv6/TCP one.
eth_corpus=$build/fuzz-corpus/eth
mkdir -p "$eth_corpus"
printf '\x01\x50\x56\x19\x20\xa7\x24\x8a\x07\xa5\x28\xc8\x81\x00\xa0\x07\x08\x00\x45\x00\x00\x1c\x00\x00\x40\x00\x40\x11\x00\x00\x01\x01\x01\x01\x02\x02\x02\x02\x04\xd2\x16\x2e\x00\x08\x00\x00' \
	>"$eth_corpus/seed-v4-udp-vlan"
printf '\x33\x33\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x86\xdd\x60\x00\x00\x00\x00\x14\x06\x40\xa0\xa1\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\xb0\xb1\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x04\xd2\x16\x2e\x00\x00\x00\x00\x00\x00\x00\x00\x50\x00\xff\xff\x00\x00\x00\x00' \
	>"$eth_corpus/seed-v6-tcp"
"$build/bin/fuzz_eth" -max_total_time=3 -max_len=4200 -timeout=10 \
	-print_final_stats=1 -artifact_prefix="$artifacts/" "$eth_corpus"

# The same-host channel's rings (src/chan/shm_ring.h), a peer's hostile
# indices and records: 3 s. Seeds: tail 16, head 0, an 8-byte inline record;
# tail 40, a mapped record of 16 bytes at offset 100 of fd 3, inode 7.
shm_corpus=$build/fuzz-corpus/shm_ring
mkdir -p "$shm_corpus"
printf '\x10\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x20\x00\x00\x00\x00\x00\x08\x00\x00\x00abcdefgh' \
	>"$shm_corpus/seed-inline"
printf '\x28\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x20\x00\x03\x00\x00\x00\x10\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x00\x00\x00\x00\x00\x64\x00\x00\x00\x00\x00\x00\x00' \
	>"$shm_corpus/seed-mapped"
"$build/bin/fuzz_shm_ring" -max_total_time=3 -max_len=1100 -timeout=10 \
	-print_final_stats=1 -artifact_prefix="$artifacts/" "$shm_corpus"

# UD: a SEND with immediate and a plain SEND (wire/ud.h), and a GRH area.
ud_secs=$((secs / 4 > 5 ? secs / 4 : 5))
ud_corpus=$build/fuzz-corpus/ud
mkdir -p "$ud_corpus" "$artifacts"
printf 'SU\x01\x65\x80\x01\x23\x45\x00\x0c\x0d\x02\x00\x0a\x0b\x01\x11\x11\x11\x11\xca\xfe\xba\xbe\x00\x00\x00\x03abc' \
	>"$ud_corpus/seed-imm"
printf 'SU\x01\x64\x00\x00\x00\x00\x00\x0c\x0d\x02\x00\x0a\x0b\x01\x11\x11\x11\x11\x00\x00\x00\x00\x00\x00\x00\x0chello, world' \
	>"$ud_corpus/seed-send"
"$build/bin/fuzz_ud" -max_total_time="$ud_secs" -max_len=4200 -timeout=10 \
	-print_final_stats=1 -artifact_prefix="$artifacts/" "$ud_corpus"
secs=$((secs > ud_secs ? secs - ud_secs : 5))

mkdir -p "$corpus" "$artifacts"

# Seeds: the first byte picks the decoder (see LLVMFuzzerTestOneInput),
# the rest are the unit tests' hand-made vectors.
seed() { printf "$2" >"$corpus/seed-$1"; }
req='MPA ID Req Frame'
rep='MPA ID Rep Frame'
seed mpa-req    "\x00$req\x40\x01\x00\x00"
seed mpa-rep2   "\x00$rep\x50\x02\x00\x07\x80\x10\xc0\x04hi!"
seed mpa-reject "\x00$rep\x20\x01\x00\x02no"
pong='\x00\x17\x41\x43\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00pong!\x00\x00\x00\xc1\x0c\xa8\x9b'
seed fpdu       "\x01$pong"
seed fpdu-crc   "\x02$pong"
seed hdr-send   '\x03\x41\x43\x00\x00\x00\x00\x00\x00\x00\x00\x11\x22\x33\x44\x55\x66\x77\x88'
seed hdr-inv    '\x03\x41\x44\xde\xad\xbe\xef\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00'
seed hdr-areq   '\x03\x41\x4a\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x0a\x00\x00\x00\x00'
seed hdr-write  '\x03\x81\x40\x12\x34\x56\x78\x01\x23\x45\x67\x89\xab\xcd\xef'
seed read-req   '\x04\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c'
seed atomic-req '\x05\x00\x00\x00\x02\xa1\xa2\xa3\xa4\xb1\xb2\xb3\xb4\xc1\xc2\xc3\xc4\xc5\xc6\xc7\xc8\xd1\xd2\xd3\xd4\xd5\xd6\xd7\xd8\xff\xff\xff\xff\xff\xff\xff\xff\xe1\xe2\xe3\xe4\xe5\xe6\xe7\xe8\xff\xff\xff\xff\x00\x00\x00\x00'
seed atomic-rsp '\x06\xa1\xa2\xa3\xa4\x01\x02\x03\x04\x05\x06\x07\x08'
seed term-qn    '\x07\x12\x01\xc0\x00\x00\x20\x41\x43\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x04\x00\x00\x00\x00'
seed term-plain '\x07\x00\x07\x00\x00'
seed imm        '\x08\xca\xfe\xba\xbe\x00\x00\x00\x00'
seed ext-ack    '\x09\x41\x4e\x00\x00\x00\x00\x00\x00\x00\x04\x01\x02\x03\x04\x00\x00\x00\x02'
seed ext-xrc    '\x09\x41\x4e\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x00\x00\x00\xab\xcd\xef'
seed ext-awrite '\x09\x41\x4e\x0a\x0b\x0c\x0d\x00\x00\x00\x06\x00\x00\x00\x09\x00\x00\x00\x00\x01\x02\x03\x04\x05\x06\x07\x08\x11\x12\x13\x14\x15\x16\x17\x18'

cat >"$dict" <<DICT
"$req"
"$rep"
DICT

exec "$build/bin/fuzz_wire" -max_total_time="$secs" -max_len=2048 \
	-timeout=10 -print_final_stats=1 -dict="$dict" \
	-artifact_prefix="$artifacts/" "$corpus"

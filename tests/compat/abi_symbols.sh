#!/usr/bin/env bash
# abi_symbols.sh BUILD_DIR
#
# Checks that our libibverbs.so.1 (or, with SOFTRNIC_ABI_LIB=librdmacm.so.1,
# our librdmacm.so.1: abi_symbols_rdmacm.sh) exports everything rdma-core
# 44's does:
# each (name, version node, default-or-compat) triple of the real library's
# dynamic symbol table, the version nodes themselves, and their parent
# chain.  Programs and providers are linked with BIND_NOW (ABI.md §1), so a
# single missing name@node keeps a program from starting.  Also checks that
# each symbol is a function or data object as in the real library
# (verbs_allow_disassociate_destroy is data).
#
# The node symbols (IBVERBS_1.0@@IBVERBS_1.0, ...) and the parent chain are
# what GNU ld and gold emit; lld omits both, so this test expects GNU ld.
#
# Exit: 0 all present, 1 something missing or wrong, 77 skipped (the real
# library or binutils is not installed).  Writes no files.
set -u -o pipefail

build=${1:?usage: abi_symbols.sh BUILD_DIR}
lib=${SOFTRNIC_ABI_LIB:-libibverbs.so.1}
ours="$build/lib/$lib"
if [[ $lib == libibverbs.so.1 ]]; then
	real=${SOFTRNIC_REAL_LIBIBVERBS:-/usr/lib/x86_64-linux-gnu/$lib}
else
	real=${SOFTRNIC_REAL_LIB:-/usr/lib/x86_64-linux-gnu/$lib}
fi

# Every external command is bounded so a wedged tool cannot hang CI.
run() { timeout 60 "$@"; }

if ! command -v objdump >/dev/null || ! command -v readelf >/dev/null; then
	echo "abi_symbols: SKIP: objdump/readelf not found;" \
	     "install with: sudo apt-get install binutils"
	exit 77
fi
if [[ ! -e $real ]]; then
	echo "abi_symbols: SKIP: rdma-core's $real not found;" \
	     "install with: sudo apt-get install libibverbs1 librdmacm1"
	exit 77
fi
if [[ ! -e $ours ]]; then
	echo "abi_symbols: FAIL: $ours not found (build first)"
	exit 1
fi

# objdump -T prints one defined symbol as
#   ADDR FLAGS... SECTION SIZE VERSION NAME
# where VERSION is "NODE" for the default (@@) version and "(NODE)" for a
# compat (@) one.  FLAGS is a fixed-width column holding 'O' for data and
# 'F' for functions; version-node symbols are data in *ABS*.  Emit
# "NAME VERSION KIND" per defined symbol.
symbols() {
	run objdump -T "$1" | awk '
		/^[0-9a-f]+ / && $0 !~ /\*UND\*/ && NF >= 6 {
			kind = "func"
			for (i = 2; i <= NF - 4; i++)
				if ($i ~ /O/)
					kind = "object"
			print $NF, $(NF - 1), kind
		}'
}

# readelf -V: "Name: NODE" lines of .gnu.version_d, each followed by an
# optional "Parent 1: NODE".  Emit "NODE PARENT" ("-" for none).
chains() {
	run readelf -V "$1" | awk '
		/version_d/ { in_d = 1; next }
		/version_r/ { in_d = 0 }
		!in_d { next }
		/Flags: BASE/ { next }
		/Name:/ { if (node != "") print node, parent
			  node = $NF; parent = "-"; next }
		/Parent 1:/ { parent = $NF }
		END { if (node != "") print node, parent }'
}

real_syms=$(symbols "$real") || { echo "abi_symbols: FAIL: objdump $real"; exit 1; }
our_syms=$(symbols "$ours") || { echo "abi_symbols: FAIL: objdump $ours"; exit 1; }
real_chain=$(chains "$real") || exit 1
our_chain=$(chains "$ours") || exit 1

declare -A have kind
while read -r name ver k; do
	have["$name $ver"]=1
	kind["$name $ver"]=$k
done <<<"$our_syms"

total=0 present=0 failed=0
while read -r name ver k; do
	total=$((total + 1))
	if [[ -z ${have["$name $ver"]:-} ]]; then
		if [[ $ver == \(* ]]; then
			echo "missing: $name@${ver//[()]/} (compat)"
		else
			echo "missing: $name@@$ver"
		fi
		failed=1
		continue
	fi
	present=$((present + 1))
	if [[ ${kind["$name $ver"]} != "$k" ]]; then
		echo "wrong type: $name $ver is ${kind["$name $ver"]}, rdma-core's is $k"
		failed=1
	fi
done <<<"$real_syms"

# The one data symbol providers read, named explicitly so a regression
# shows up even if the real library changes.
if [[ $lib == libibverbs.so.1 &&
      ${kind["verbs_allow_disassociate_destroy IBVERBS_PRIVATE_34"]:-} != object ]]; then
	echo "wrong type: verbs_allow_disassociate_destroy must be an OBJECT (data)"
	failed=1
fi

declare -A our_parent
while read -r node parent; do
	our_parent[$node]=$parent
done <<<"$our_chain"
while read -r node parent; do
	if [[ -z ${our_parent[$node]:-} ]]; then
		echo "missing version node: $node"
		failed=1
	elif [[ ${our_parent[$node]} != "$parent" ]]; then
		echo "wrong parent: $node inherits ${our_parent[$node]}, rdma-core's inherits $parent"
		failed=1
	fi
done <<<"$real_chain"

# Extra names are allowed (SOFTRNIC_PRIVATE_1 exists for them) but listed,
# since an extra name in an IBVERBS node is a name rdma-core never had.
declare -A real_have
while read -r name ver k; do
	real_have["$name $ver"]=1
done <<<"$real_syms"
while read -r name ver k; do
	[[ $ver == SOFTRNIC_PRIVATE_* ]] && continue
	[[ -z ${real_have["$name $ver"]:-} ]] && echo "note: extra export $name $ver"
done <<<"$our_syms"

echo "abi_symbols: $lib: $present of $total present"
exit $failed

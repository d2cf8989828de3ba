#!/bin/bash
# Interop on the wire with Linux soft-iWARP (issue 6): softrnic on the host,
# the kernel's siw in a throwaway qemu guest (tests/interop/siwvm), each
# case run both ways where it has two ends.
#
#   tests/interop/run.sh BUILD_DIR [CASE_PATTERN]
#
# Exit 0 when every case passed, 1 when one failed, 77 (skip) when the
# suite cannot run here: not root, no qemu (and none installable), the
# guest could not be built or booted, or no librdmacm.so.1 beside
# softrnic's libibverbs. Every line of the verdict says why.
#
# Environment:
#   SOFTRNIC_LIBDIR   softrnic's libraries (default BUILD_DIR/lib)
#   INTEROP_CASES     regex of case names to run (or the 2nd argument)
#   INTEROP_HOST_ENV  extra VAR=value words for the host-side programs
#                     (e.g. SOFTRNIC_EXT=0 to see past a CM finding).
#                     softrnic always runs as an iWARP RNIC here
#                     (SOFTRNIC_TRANSPORT=iwarp), as siw is one: programs
#                     such as perftest pick their own protocol from the
#                     device's transport type (docs/INTEROP.md)
#   INTEROP_TIMEOUT   seconds per program (default 120; TCG is slow)
#   INTEROP_BUDGET    seconds for the whole suite (default 0: none); the
#                     cases left when it is spent fail as "not run"
#   SIWVM_WORK        VM work dir (default /var/tmp/softrnic-interop)
#   SIWVM_NETNS       network namespace (default siwtest)
#   INTEROP_KEEP=1    leave the VM up afterwards (then: siwvm down)
#   INTEROP_CAPTURE=1 capture siw0's link into LOGS/interop.pcapng (each
#                     case has its own port; tshark decodes MPA/DDP/RDMAP)
set -uo pipefail

HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
B=${1:?usage: run.sh BUILD_DIR [CASE_PATTERN]}
B=$(cd "$B" && pwd) || exit 1
PAT=${2:-${INTEROP_CASES:-.}}
export SIWVM_WORK=${SIWVM_WORK:-/var/tmp/softrnic-interop}
export SIWVM_NETNS=${SIWVM_NETNS:-siwtest}
NS=$SIWVM_NETNS
VM="$HERE/siwvm"
LIBDIR=${SOFTRNIC_LIBDIR:-$B/lib}
TMO=${INTEROP_TIMEOUT:-120}
SHARE=$SIWVM_WORK/run/share
HOST=198.18.0.1 GUEST=198.18.0.2
LOG=$SIWVM_WORK/logs
read -r -a HOST_ENV <<<"SOFTRNIC_TRANSPORT=iwarp ${INTEROP_HOST_ENV:-}"

skip() { echo "interop: SKIP: $*"; exit 77; }

[ "$(id -u)" = 0 ] || skip "needs root (qemu, tap devices, network namespaces)"
# One run at a time per machine: the VM, its work dir and the netns are
# shared (make test in two trees at once, say).
mkdir -p "$SIWVM_WORK"
exec 9>"$SIWVM_WORK.lock"
flock -w "${INTEROP_LOCK_WAIT:-120}" 9 ||
	skip "another interop run holds $SIWVM_WORK.lock (waited ${INTEROP_LOCK_WAIT:-120} s)"
[ -x "$B/bin/softrnic" ] || skip "no $B/bin/softrnic: build first"
[ -e "$LIBDIR/libibverbs.so.1" ] || skip "no libibverbs.so.1 in $LIBDIR"
[ -e "$LIBDIR/librdmacm.so.1" ] ||
	skip "no librdmacm.so.1 in $LIBDIR (softrnic's RDMA CM is not built here; set SOFTRNIC_LIBDIR to a build that has it)"
for p in interop_reject interop_badrkey; do
	[ -x "$B/bin/$p" ] || skip "no $B/bin/$p (Debian's librdmacm-dev missing at configure time?)"
done
if ! command -v qemu-system-x86_64 >/dev/null; then
	echo "interop: qemu-system-x86_64 missing; siwvm build installs it (apt-get)"
fi
timeout 1800 "$VM" build >"$SIWVM_WORK.build.log" 2>&1 ||
	skip "guest build failed (see $SIWVM_WORK.build.log): $(tail -1 "$SIWVM_WORK.build.log")"
command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64 (and apt-get could not install it)"

cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	[ "${INTEROP_KEEP:-0}" = 1 ] || "$VM" down >/dev/null 2>&1
}
pids=()
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

boot() {
	"$VM" down >/dev/null 2>&1
	SIWVM_BOOT_TIMEOUT=120 timeout 180 "$VM" up --no-cmd >"$SIWVM_WORK.up.log" 2>&1 &&
		cp "$B/bin/interop_reject" "$B/bin/interop_badrkey" "$SHARE/"
}
boot || skip "guest did not boot (see $SIWVM_WORK.up.log): $(tail -1 "$SIWVM_WORK.up.log")"
rm -rf "$LOG"; mkdir -p "$LOG"
if [ "${INTEROP_CAPTURE:-0}" = 1 ]; then
	ip netns exec "$NS" dumpcap -q -i siwtap0 -w "$LOG/interop.pcapng" 2>"$LOG/dumpcap.err" &
	pids+=($!)
	sleep 1
fi
KVER=$(timeout 30 "$VM" exec -t 20 'uname -r' 2>/dev/null | tr -d '\r')
echo "interop: softrnic $LIBDIR <-> siw on Linux $KVER (guest $GUEST, host $HOST, netns $NS)"
[ ${#HOST_ENV[@]} -gt 0 ] && echo "interop: host env: ${HOST_ENV[*]}"

# host CMD...: a softrnic program in the netns, bounded. With BG=1 (a
# server started with &) timeout replaces the subshell, so that killing
# the job's PID reaches the program.
host() {
	${BG:+exec} timeout -k 5 "$TMO" ip netns exec "$NS" env SOFTRNIC_LIBDIR="$LIBDIR" \
		"${HOST_ENV[@]}" "$B/bin/softrnic" run -- "$@"
}
# guest CMD: a shell command in the guest, bounded (siwvm exec, killed,
# kills the command in the guest)
guest() { ${BG:+exec} timeout -k 5 $((TMO + 20)) "$VM" exec -t "$TMO" "$*"; }
# wait_listen PORT WHERE: until a TCP listener is up on PORT (host or guest)
wait_listen() {
	for _ in $(seq 100); do
		if [ "$2" = host ]; then
			ip netns exec "$NS" ss -Htln "sport = :$1" | grep -q . && return 0
		else
			guest "grep -qi ':$(printf %04X "$1") 00000000:0000 0A' /proc/net/tcp" 2>/dev/null && return 0
		fi
		sleep 0.2
	done
	return 1
}

npass=0 nfail=0 nskip=0 port=7300
results=()
BUDGET=${INTEROP_BUDGET:-0}
failed=()
in_retry= retry_wanted= nretried=0
verdict() { # verdict NAME pass|fail|skip REASON
	if [ "$2" = fail ] && [ -z "$in_retry" ] && [ -z "$guest_dead" ] && ! link_ok; then
		# Not softrnic's doing: qemu's virtio-net stops now and then
		# under TCG on a loaded host (both directions, for good). The
		# case runs once more on a fresh guest (run_case).
		echo "interop: $1: the guest's network link is dead ($3); rebooting the guest, running the case again"
		tail -40 "$SIWVM_WORK/run/console.log" >"$LOG/$1.linkdead.console" 2>/dev/null
		retry_wanted=1
		return
	fi
	[ -n "$in_retry" ] && [ "$2" != skip ] && set -- "$1" "$2" "$3 (run again after the guest's link died)"
	results+=("$(printf '%-4s %-34s %s' "$2" "$1" "$3")")
	[ "$2" = fail ] && { failed+=("$1"); guest_diag "$1"; }
	case $2 in pass) npass=$((npass + 1)) ;; fail) nfail=$((nfail + 1)) ;; *) nskip=$((nskip + 1)) ;; esac
	printf 'interop: %-4s %-34s %s\n' "$(tr a-z A-Z <<<"$2")" "$1" "$3"
}

# pair NAME SERVER_SIDE SERVER_CMD CLIENT_CMD: run a server on one side and
# a client on the other; logs in $LOG/NAME.{server,client}; sets prc/crc.
pair() {
	local name=$1 sside=$2 scmd=$3 ccmd=$4 sp
	if [ "$sside" = guest ]; then
		BG=1 guest "$scmd" >"$LOG/$name.server" 2>&1 &
	else
		# shellcheck disable=SC2086
		BG=1 host $scmd >"$LOG/$name.server" 2>&1 &
	fi
	sp=$!
	pids+=("$sp")
	if ! wait_listen "$port" "$sside"; then
		echo "(server never listened on $port)" >>"$LOG/$name.client"
	fi
	if [ "$sside" = guest ]; then
		# shellcheck disable=SC2086
		host $ccmd >"$LOG/$name.client" 2>&1
	else
		guest "$ccmd" >"$LOG/$name.client" 2>&1
	fi
	crc=$?
	# the server ends by itself once its client is done; give it time
	for _ in $(seq 150); do kill -0 "$sp" 2>/dev/null || break; sleep 0.2; done
	kill "$sp" 2>/dev/null
	wait "$sp"
	prc=$?
	port=$((port + 1))
}

why() { # a short reason from the logs of case NAME
	local f
	for f in "$LOG/$1".client "$LOG/$1".server; do
		[ -s "$f" ] || continue
		grep -m1 -iE 'error|fail|timeout|refused|reset|status [^0]|Killed|unable|couldn' "$f" | cut -c1-100 && return
	done
	echo "client rc=$crc server rc=$prc"
}

# guest_diag NAME: what the guest's kernel said, for a failed case. A siw
# bug (a BUG or WARN, a wedged QP) shows there; a guest that no longer
# answers gets its console log instead, and the cases after it fail.
guest_dead=
guest_diag() {
	[ -n "$guest_dead" ] && return
	if ! timeout 30 "$VM" exec -t 20 'dmesg | grep -v "speed is unknown" | tail -40' \
		>"$LOG/$1.dmesg" 2>&1; then
		guest_dead=$1
		tail -80 "$SIWVM_WORK/run/console.log" >"$LOG/$1.console" 2>/dev/null
	fi
}

# link_ok: the guest still reaches the host over siw0's link (busybox ping
# in the guest, through the agent, which does not need the network).
link_ok() {
	timeout 30 "$VM" exec -t 20 "ping -c 2 -W 2 $HOST" >/dev/null 2>&1
}

# run_case CASE_FN ARGS...: a case, and once more on a rebooted guest if
# its failure came with a dead guest link (see verdict).
run_case() {
	retry_wanted=
	"$@"
	[ -n "$retry_wanted" ] || return 0
	nretried=$((nretried + 1))
	if ! boot; then
		guest_dead="a reboot after the link died"
		verdict "$2" fail "the guest did not boot again: $(tail -1 "$SIWVM_WORK.up.log")"
		return
	fi
	in_retry=1
	"$@"
	in_retry=
}

want() {
	[[ $1 =~ $PAT ]] || return 1
	if [ -n "$guest_dead" ]; then
		verdict "$1" fail "not run: the guest stopped answering during $guest_dead"
		return 1
	fi
	if [ "$BUDGET" -gt 0 ] && [ "$SECONDS" -ge "$BUDGET" ]; then
		verdict "$1" fail "not run: the suite's time budget (${BUDGET} s) is spent"
		return 1
	fi
}

# ---- cases --------------------------------------------------------------

case_rping() { # rping -C 100 -v; both ends print 100 ping data lines
	local name=$1 sside=$2 sa=$3 n
	want "$name" || return
	pair "$name" "$sside" "rping -s -a $sa -p $port -C 100 -v" "rping -c -a $sa -p $port -C 100 -v"
	n=$(grep -c '^ping data: rdma-ping-' "$LOG/$name.client")
	if [ "$crc" = 0 ] && [ "$n" = 100 ] && [ "$(grep -c 'ping data: rdma-ping-' "$LOG/$name.server")" -ge 100 ]; then
		verdict "$name" pass "100 pings verified"
	else verdict "$name" fail "$n/100 pings, $(why "$name")"; fi
}

case_ucmatose() {
	local name=$1 sside=$2 sa=$3
	want "$name" || return
	pair "$name" "$sside" "ucmatose -b $sa -p $port" "ucmatose -s $sa -p $port"
	if [ "$crc" = 0 ] && [ "$prc" = 0 ] && grep -q 'test complete' "$LOG/$name.client" &&
		grep -q 'return status 0' "$LOG/$name.server"; then
		verdict "$name" pass "connect, sends, disconnect both ends"
	else verdict "$name" fail "$(why "$name")"; fi
}

case_perftest() { # case_perftest NAME TOOL SERVER_SIDE
	local name=$1 tool=$2 sside=$3 sa sdev cdev
	want "$name" || return
	if [ "$sside" = guest ]; then sa=$GUEST; sdev="-d siw0"; cdev=; else sa=$HOST; sdev=; cdev="-d siw0"; fi
	pair "$name" "$sside" "$tool -R $sdev -n 100 -p $port -F" "$tool -R $cdev -n 100 -p $port -F $sa"
	if [ "$crc" = 0 ] && [ "$prc" = 0 ] && grep -qE '^ *[0-9]+ +100 ' "$LOG/$name.client"; then
		verdict "$name" pass "$(grep -E '^ *[0-9]+ +100 ' "$LOG/$name.client" | awk '{print $1 " B x " $2}' | head -1)"
	else verdict "$name" fail "$(why "$name")"; fi
}

case_reject() {
	local name=$1 sside=$2 sa=$3
	want "$name" || return
	if [ "$sside" = guest ]; then
		pair "$name" guest "/mnt/host/interop_reject server $sa $port" "$B/bin/interop_reject client $sa $port"
	else
		pair "$name" host "$B/bin/interop_reject server $sa $port" "/mnt/host/interop_reject client $sa $port"
	fi
	if [ "$crc" = 0 ] && [ "$prc" = 0 ]; then
		verdict "$name" pass "private data both ways ($(grep -m1 'rejected status' "$LOG/$name.client"))"
	else verdict "$name" fail "$(grep -hE 'PD|MISMATCH|expected' "$LOG/$name".* | head -2 | tr '\n' ' ') $(why "$name")"; fi
}

case_badrkey() { # softrnic requester, siw responder
	local name=$1 op=$2
	want "$name" || return
	pair "$name" guest "/mnt/host/interop_badrkey server $GUEST $port 1" "$B/bin/interop_badrkey client $GUEST $port $op"
	if [ "$crc" = 0 ]; then
		verdict "$name" pass "$(grep -E '^wr [23]:' "$LOG/$name.client" | tr '\n' ' ')"
	else verdict "$name" fail "$(grep -E '^wr [23]:|timeout' "$LOG/$name.client" | tr '\n' ' ') $(why "$name")"; fi
}

case_plain_peer() { # softrnic requester, siw responder: no extensions posted
	local name=$1
	want "$name" || return
	pair "$name" guest "/mnt/host/interop_badrkey server $GUEST $port 1" "$B/bin/interop_badrkey client $GUEST $port ext"
	if [ "$crc" = 0 ]; then
		verdict "$name" pass "imm/atomics/atomic write refused at post ($(grep -c 'Operation not supported' "$LOG/$name.client")/5), WRITE+READ $(grep -o 'read back [a-z]*' "$LOG/$name.client"), 8 READs at ORD 1"
	else verdict "$name" fail "$(grep -E '^post|read back|READ burst' "$LOG/$name.client" | tr '\n' ' ') $(why "$name")"; fi
}

case_mpa_probe() { # raw MPA rev 1 request to a listener (siw or softrnic): rev 1 reply
	local name=$1 side=$2 sa who
	want "$name" || return
	if [ "$side" = guest ]; then
		sa=$GUEST who=siw
		BG=1 guest "rping -s -a $sa -p $port -C 1" >"$LOG/$name.server" 2>&1 &
	else
		sa=$HOST who=softrnic
		BG=1 host rping -s -a "$sa" -p "$port" -C 1 >"$LOG/$name.server" 2>&1 &
	fi
	local sp=$!
	pids+=("$sp")
	wait_listen "$port" "$side"
	timeout 20 ip netns exec "$NS" python3 "$HERE/mpa-probe.py" "$sa" "$port" 1 >"$LOG/$name.client" 2>&1
	crc=$?
	kill "$sp" 2>/dev/null; wait "$sp"
	if grep -q 'flags=0x00 rev=1' "$LOG/$name.client"; then
		verdict "$name" pass "$who answers a rev 1 request with a rev 1 reply"
	else verdict "$name" fail "$(head -2 "$LOG/$name.client" | tr '\n' ' ')"; fi
	port=$((port + 1))
}

# siw_load VARIANT: the guest's siw becomes /lib/siw-variants/siw-VARIANT.ko
# (siwvm build: siw with one MPA knob changed, S4), or the module tree's
# for "stock"; siw0 goes back on eth0 as guest-init puts it. The cases'
# programs are gone by then, so nothing holds siw for long.
siw_load() {
	local load="modprobe siw"
	[ "$1" = stock ] || load="insmod /lib/siw-variants/siw-$1.ko"
	timeout 100 "$VM" exec -t 90 "i=0
		while grep -q '^siw ' /proc/modules; do
			rmmod siw 2>/dev/null && break
			i=\$((i + 1)); [ \$i -ge 40 ] && { echo 'rmmod siw: still in use'; exit 1; }
			sleep 0.5
		done
		$load || { echo '$load failed'; exit 1; }
		rdma link add siw0 type siw netdev eth0 || { echo 'rdma link add siw0 failed'; exit 1; }
		rdma link show siw0/1"
}

# siw_restore NAME: the stock siw back; if that fails, a fresh guest (which
# loads the stock one), so that no later case runs against a variant.
siw_restore() {
	siw_load stock >>"$LOG/$1.swap" 2>&1 && return 0
	echo "interop: $1: the stock siw did not come back ($(tail -1 "$LOG/$1.swap")); rebooting the guest"
	boot || guest_dead="$1 (the guest did not boot again)"
}

# case_variant NAME VARIANT: a siw built with one MPA knob changed is the
# initiator (rping -C 10 -v to a softrnic server; for p2p, ucmatose too,
# whose server speaks first). The connection is
# captured and checked (mpa-check.py): what each side asked and answered,
# CRC32c in every FPDU, the RTR and who sent first. The stock siw is put
# back afterwards whatever happened. Each program has at most 60 s.
case_variant() {
	local name=$1 v=$2 p=$port dc res='' n m TMO=$((TMO < 60 ? TMO : 60))
	want "$name" || return
	if ! siw_load "$v" >"$LOG/$name.swap" 2>&1; then
		res=$(tail -1 "$LOG/$name.swap")
		siw_restore "$name"
		verdict "$name" fail "siw-$v.ko did not load: $res"
		port=$((port + 1))
		return
	fi
	ip netns exec "$NS" dumpcap -q -i siwtap0 -P -f "tcp port $p or tcp port $((p + 1))" \
		-w "$LOG/$name.pcap" >"$LOG/$name.dumpcap" 2>&1 &
	dc=$!
	pids+=("$dc")
	sleep 1
	pair "$name" host "rping -s -a $HOST -p $p -C 10 -v" "rping -c -a $HOST -p $p -C 10 -v"
	n=$(grep -c '^ping data: rdma-ping-' "$LOG/$name.client")
	m=$(grep -c 'ping data: rdma-ping-' "$LOG/$name.server")
	[ "$crc" = 0 ] && [ "$n" = 10 ] && [ "$m" -ge 10 ] || res="$n/10 pings, $(why "$name")"
	if [ "$v" = p2p ] && [ -z "$res" ]; then
		# ucmatose's server speaks first: softrnic must still wait
		# for the RTR (RFC 6581)
		pair "$name-ucmatose" host "ucmatose -b $HOST -p $((p + 1))" "ucmatose -s $HOST -p $((p + 1))"
		[ "$crc" = 0 ] && [ "$prc" = 0 ] && grep -q 'test complete' "$LOG/$name-ucmatose.client" &&
			grep -q 'return status 0' "$LOG/$name-ucmatose.server" ||
			res="ucmatose: $(why "$name-ucmatose")"
	else
		port=$((port + 1))
	fi
	sleep 0.5
	kill "$dc" 2>/dev/null
	wait "$dc"
	siw_restore "$name"
	python3 "$HERE/mpa-check.py" "$LOG/$name.pcap" "$p" >"$LOG/$name.mpa" 2>&1
	local req rep ini rsp
	req=$(grep -m1 '^request:' "$LOG/$name.mpa") rep=$(grep -m1 '^reply:' "$LOG/$name.mpa")
	ini=$(grep -m1 '^initiator:' "$LOG/$name.mpa") rsp=$(grep -m1 '^responder:' "$LOG/$name.mpa")
	if [ "$v" = p2p ]; then
		python3 "$HERE/mpa-check.py" "$LOG/$name.pcap" "$((p + 1))" >"$LOG/$name-ucmatose.mpa" 2>&1
		local uini ursp
		uini=$(grep -m1 '^initiator:' "$LOG/$name-ucmatose.mpa") ursp=$(grep -m1 '^responder:' "$LOG/$name-ucmatose.mpa")
	fi
	if [ -z "$res" ] && [ -z "$req" ]; then
		res="no MPA exchange in the capture: $(tail -1 "$LOG/$name.mpa"; tail -1 "$LOG/$name.dumpcap")"
	fi
	if [ -z "$res" ]; then
		case $v in
		rev1)
			[[ $req == *"rev=1 "* ]] || res="siw did not ask rev 1: $req"
			[[ -n $res || $rep == *"rev=1 flags=0x00 "* ]] || res="softrnic's reply is not rev 1: $rep"
			[ -n "$res" ] || res=ok:"siw asks rev 1, softrnic answers rev 1 (flags 0x00); 10 pings verified"
			;;
		crc)
			[[ $req =~ flags=0x[4-7cdefCDEF] ]] || res="siw did not ask CRC: $req"
			[[ -n $res || $rep =~ flags=0x[4-7cdefCDEF] ]] || res="softrnic's reply has no C bit: $rep"
			[[ -n $res || ( $ini =~ crc_ok=[1-9].*crc_zero=0\ crc_bad=0 && $rsp =~ crc_ok=[1-9].*crc_zero=0\ crc_bad=0 ) ]] ||
				res="FPDUs without a good CRC32c: ${ini#*: } / ${rsp#*: }"
			[ -n "$res" ] || res=ok:"C set both ways; CRC32c good in all $(grep -o 'fpdus=[0-9]*' <<<"$ini" | cut -d= -f2) + $(grep -o 'fpdus=[0-9]*' <<<"$rsp" | cut -d= -f2) FPDUs; 10 pings verified"
			;;
		p2p)
			[[ $req == *"p2p=1 rtr=write,read"* ]] || res="siw did not ask peer-to-peer: $req"
			[[ -n $res || $rep == *"p2p=1 rtr=write" ]] || res="softrnic's reply does not pick one RTR: $rep"
			[[ -n $res || $ini == *"first=write len=0 "* ]] || res="siw's first FPDU is not a zero-length WRITE: $ini"
			[[ -n $res || $uini == *"first=write len=0 "* ]] || res="ucmatose: siw's first FPDU is not a zero-length WRITE: $uini"
			if [ -z "$res" ]; then
				local ti tr
				ti=$(grep -o 't=[0-9.]*' <<<"$uini" | cut -d= -f2) tr=$(grep -o 't=[0-9.]*' <<<"$ursp" | cut -d= -f2)
				awk -v a="$ti" -v b="$tr" 'BEGIN { exit !(a != "" && b != "" && b >= a) }' ||
					res="ucmatose: softrnic sent before the RTR (initiator t=$ti, responder t=$tr)"
			fi
			[ -n "$res" ] || res=ok:"siw offers WRITE|READ RTR, softrnic picks WRITE, siw's zero-length WRITE comes first; rping 10 pings verified; ucmatose: softrnic's server sends $(awk -v a="$ti" -v b="$tr" 'BEGIN { printf "%.0f", (b - a) * 1e6 }') µs after the RTR"
			;;
		esac
	fi
	if [[ $res == ok:* ]]; then
		verdict "$name" pass "${res#ok:}"
	else verdict "$name" fail "$res"; fi
}

run_case case_rping rping-softrnic-client-siw-server guest "$GUEST"
run_case case_rping rping-siw-client-softrnic-server host "$HOST"
run_case case_ucmatose ucmatose-softrnic-client guest "$GUEST"
run_case case_ucmatose ucmatose-siw-client host "$HOST"
for t in ib_send_bw ib_write_bw ib_read_bw ib_write_lat ib_read_lat; do
	run_case case_perftest "$t-softrnic-client" "$t" guest
	run_case case_perftest "$t-siw-client" "$t" host
done
run_case case_reject reject-by-siw guest "$GUEST"
run_case case_reject reject-by-softrnic host "$HOST"
run_case case_badrkey badrkey-write-to-siw write
run_case case_badrkey badrkey-read-from-siw read
run_case case_plain_peer plain-peer-refuses-ext
run_case case_mpa_probe mpa-rev1-siw-reply guest
run_case case_mpa_probe mpa-rev1-softrnic-reply host

# MPA rev 1, CRC required and peer-to-peer from siw's side need siw's
# knobs, which Linux 6.1 compiles in as constants (S4): siwvm build makes
# a siw.ko for each (/lib/siw-variants in the guest), which these cases
# swap in for the stock one.
run_case case_variant mpa-rev1-siw-initiator rev1
run_case case_variant crc-siw-required crc
run_case case_variant peer2peer-rtr p2p
if want crc-softrnic-requests; then
	HOST_ENV+=(SOFTRNIC_MPA_CRC=1)
	run_case case_rping crc-softrnic-requests guest "$GUEST"
	unset 'HOST_ENV[${#HOST_ENV[@]}-1]'
fi

# Each failure with the guest kernel's account of it.
for n in "${failed[@]}"; do
	for f in "$LOG/$n.dmesg" "$LOG/$n.console"; do
		[ -s "$f" ] || continue
		echo "---- $n: guest ${f##*.} (last lines) ----"
		grep -E 'siw|iw_cm|BUG|Oops|WARNING|Call Trace|RIP|hung|panic' "$f" | tail -15
	done
done
[ "$nretried" -gt 0 ] && echo "interop: $nretried case(s) ran again on a rebooted guest after its network link died"
echo "interop: logs in $LOG"
echo "interop: $npass passed, $nfail failed, $nskip skipped (Linux $KVER siw)"
[ "$nfail" = 0 ]

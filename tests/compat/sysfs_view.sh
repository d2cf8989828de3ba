#!/usr/bin/env bash
# compat/sysfs_view: the /sys/class/infiniband view `softrnic run` gives a
# program (tools/sysfs_view.c). A reader of ports/1/gids/N, gid_attrs/types/N
# and ndevs/N must agree with unmodified ibv_devinfo -v run the same way; the
# rest of /sys must be untouched; /dev/infiniband/uverbs0 is a character
# device that infiniband_verbs/uverbs0/dev names, and the rest of /dev is
# the host's; SOFTRNIC_SYSFS=0 turns the view off; the host's /sys and
# /dev never change; as root an unprivileged user gets the view too (user
# namespace) where the system allows it.
#
# usage: sysfs_view.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip
set -uo pipefail
BUILD=$(cd "${1:?usage: sysfs_view.sh BUILD_DIR}" && pwd)
SOFTRNIC=$BUILD/bin/softrnic
unset SOFTRNIC_LIBDIR SOFTRNIC_SYSFS SOFTRNIC_GUID
py=/usr/bin/python3
dev=/sys/class/infiniband/softrnic0

if [[ ! -x /usr/bin/ibv_devinfo ]]; then
	echo "SKIP: ibv_devinfo not installed (apt-get install ibverbs-utils)"
	exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM HUP
failed=0
fail() { echo "FAIL: $*"; failed=1; }

# The view must be possible here at all (containers may refuse namespaces).
if ! timeout 30 "$SOFTRNIC" run -- test -d "$dev"; then
	msg=$(SOFTRNIC_DEBUG=1 timeout 30 "$SOFTRNIC" run -- true 2>&1 | head -1)
	echo "SKIP: no sysfs view here: ${msg:-no reason printed}"
	exit 77
fi

# reader: the GID table as ibv_devinfo -v prints it (entries whose interface
# id, bytes 8-15, is non-zero), from sysfs alone; then node_guid and the
# netdev that device/net lists.
cat >"$tmp/reader.py" <<'PY'
import os, socket, sys
d = sys.argv[1]
p = d + '/ports/1'
for i in sorted(int(n) for n in os.listdir(p + '/gids')):
    raw = bytes.fromhex(open('%s/gids/%d' % (p, i)).read().strip().replace(':', ''))
    if not any(raw[8:]):
        continue
    typ = open('%s/gid_attrs/types/%d' % (p, i)).read().strip()
    ndev = open('%s/gid_attrs/ndevs/%d' % (p, i)).read().strip()
    assert os.path.isdir('/sys/class/net/' + ndev), ndev
    print('GID[%3d]: %s, %s' % (i, socket.inet_ntop(socket.AF_INET6, raw), typ))
print('node_guid: ' + open(d + '/node_guid').read().strip())
print('net: ' + ' '.join(os.listdir(d + '/device/net')))
PY
timeout 60 "$SOFTRNIC" run -- bash -c "$py $tmp/reader.py $dev && ibv_devinfo -v" \
	>"$tmp/out" 2>"$tmp/err" || { fail "reader or ibv_devinfo failed"; cat "$tmp/err"; }
sed -n '/^GID\[/p' "$tmp/out" >"$tmp/sysfs.gids"
grep -E '^[[:space:]]+GID\[' "$tmp/out" | sed -E 's/^[[:space:]]+//; s/:[[:space:]]+/: /' \
	>"$tmp/devinfo.gids"
if [[ ! -s $tmp/sysfs.gids ]]; then
	fail "the view has no GID"
elif ! diff -u "$tmp/devinfo.gids" "$tmp/sysfs.gids"; then
	fail "sysfs GIDs differ from ibv_devinfo -v's"
fi
g1=$(sed -n 's/^node_guid: //p' "$tmp/out" | head -1)
g2=$(awk '/node_guid:/ { print $2; exit }' "$tmp/out")
[[ -n $g1 && $g1 == "$g2" ]] || fail "node_guid: sysfs '$g1', ibv_devinfo '$g2'"
net=$(sed -n 's/^net: //p' "$tmp/out")
[[ -n $net ]] || fail "device/net lists no netdev"
echo "view: $(wc -l <"$tmp/sysfs.gids") GIDs as ibv_devinfo shows them; node_guid $g1; device/net: $net"

# ibv_read_sysfs_file on ibdev_path reads the view (a program of our own).
cat >"$tmp/rd.c" <<'C'
#include <infiniband/verbs.h>
#include <stdio.h>
int main(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	char buf[64];

	if (!l || !l[0] || ibv_read_sysfs_file(l[0]->ibdev_path, "ports/1/link_layer",
					       buf, sizeof(buf)) < 0)
		return 1;
	printf("%s\n", buf);
	return 0;
}
C
if gcc -o "$tmp/rd" "$tmp/rd.c" -libverbs 2>"$tmp/cc.err"; then
	ll=$(timeout 30 "$SOFTRNIC" run -- "$tmp/rd")
	[[ $ll == Ethernet ]] || fail "ibv_read_sysfs_file(ibdev_path, ports/1/link_layer) = '$ll'"
	if [[ ! -e $dev ]]; then
		SOFTRNIC_SYSFS=0 timeout 30 "$SOFTRNIC" run -- "$tmp/rd" >/dev/null &&
			fail "ibv_read_sysfs_file found a file with SOFTRNIC_SYSFS=0"
	fi
fi

# The rest of /sys is the real one, and writable sysfs stays as it was.
want=$(cat /sys/class/net/lo/ifindex)
got=$(timeout 30 "$SOFTRNIC" run -- cat /sys/class/net/lo/ifindex)
[[ $got == "$want" ]] || fail "/sys/class/net/lo/ifindex reads '$got' in the view"
want=$(ls /sys/class | grep -v '^infiniband' | tr '\n' ' ')
got=$(timeout 30 "$SOFTRNIC" run -- ls /sys/class | grep -v '^infiniband' | tr '\n' ' ')
[[ $got == "$want" ]] || fail "/sys/class differs: '$got' vs '$want'"
timeout 30 "$SOFTRNIC" run -- test -e /sys/class/net/lo/device/../subsystem -o -d /sys/devices/virtual/net/lo ||
	fail "/sys/devices not reachable in the view"

# The /dev view (tools/dev_view.c): /dev/infiniband/uverbs0 is a character
# device the user may read and write, infiniband_verbs/uverbs0/dev names it,
# the rest of /dev is the host's (/dev/shm shared: a file made inside is
# seen outside), and the host's /dev does not change.
uv=/dev/infiniband/uverbs0
host_ib=$( [[ -e /dev/infiniband ]] && echo yes || echo no)
out=$(timeout 30 "$SOFTRNIC" run -- sh -c "test -c $uv -a -r $uv -a -w $uv && stat -c '%t:%T' $uv &&
	cat /sys/class/infiniband_verbs/uverbs0/dev && echo ok >/dev/shm/softrnic-view-\$\$ &&
	echo \$\$ && echo hi >/dev/null && ls /dev/pts" 2>&1)
rdev=$(sed -n 1p <<<"$out")
sysdev=$(sed -n 2p <<<"$out")
vpid=$(sed -n 3p <<<"$out")
if [[ -z $rdev || $rdev != *:* ]]; then
	fail "$uv is not a character device in the view: $out"
else
	# stat prints hex major:minor; the sysfs file decimal.
	want=$((16#${rdev%%:*})):$((16#${rdev##*:}))
	[[ $sysdev == "$want" ]] || fail "infiniband_verbs/uverbs0/dev '$sysdev', node $want"
	if [[ -n $vpid && -f /dev/shm/softrnic-view-$vpid ]]; then
		rm -f "/dev/shm/softrnic-view-$vpid"
	else
		fail "/dev/shm in the view is not the host's"
	fi
	echo "dev view: $uv $want, /dev/shm shared"
fi
[[ $( [[ -e /dev/infiniband ]] && echo yes || echo no) == "$host_ib" ]] ||
	fail "the /dev view leaked to the host's /dev"
want=$(ls -A /dev | grep -v '^infiniband$' | tr '\n' ' ')
got=$(timeout 30 "$SOFTRNIC" run -- ls -A /dev | grep -v '^infiniband$' | tr '\n' ' ')
[[ $got == "$want" ]] || fail "/dev differs in the view: '$got' vs '$want'"

# SOFTRNIC_SYSFS=0: no view (where the host has no infiniband class).
if [[ ! -e /sys/class/infiniband ]]; then
	SOFTRNIC_SYSFS=0 timeout 30 "$SOFTRNIC" run -- test -e /sys/class/infiniband &&
		fail "SOFTRNIC_SYSFS=0 still shows /sys/class/infiniband"
	if [[ ! -e /dev/infiniband ]]; then
		SOFTRNIC_SYSFS=0 timeout 30 "$SOFTRNIC" run -- test -e /dev/infiniband &&
			fail "SOFTRNIC_SYSFS=0 still shows /dev/infiniband"
	fi
	[[ -e /sys/class/infiniband ]] && fail "the view leaked to the host's /sys"
fi

# Unprivileged: a user namespace, the caller's uid kept, no capabilities.
if (($(id -u) == 0)) && command -v setpriv >/dev/null && [[ -r $SOFTRNIC ]]; then
	out=$(cd / && SOFTRNIC_DEBUG=1 timeout 30 setpriv --reuid=65534 --regid=65534 \
		--clear-groups "$SOFTRNIC" run -- sh -c "id -u; test -c $uv -a -w $uv && echo chr;
		cat $dev/ports/1/gids/0" 2>&1)
	case $out in
	*refused*) echo "note: unprivileged view refused here: $out" ;;
	65534*chr*:*) echo "unprivileged: uid 65534, $uv, gids/0 $(echo "$out" | tail -1)" ;;
	*) fail "unprivileged run: $out" ;;
	esac
fi

((failed)) && exit 1
echo "PASS"

#!/usr/bin/env python3
"""What an MPA connection negotiated, and what went over it, from a capture.

  mpa-check.py CAPTURE.pcap PORT

The capture is classic pcap (dumpcap -P) of Ethernet frames holding
one TCP connection to PORT (the first one seen). Prints, one per line:

  request: rev=R flags=0xFF pd_len=N [ird=I ord=O p2p=0|1 rtr=write,read,send]
  reply:   the same
  initiator: fpdus=N crc_ok=N crc_zero=N crc_bad=N first=OP len=L t=SECONDS
  responder: the same (first=none when it sent no FPDU)

OP is the first FPDU's RDMAP opcode (write, read_req, read_resp, send...);
len its payload length (a zero-length WRITE or READ is an RFC 6581 RTR).
t is when the segment carrying it was captured. crc_ok counts FPDUs
whose CRC field is the CRC32c of the FPDU (RFC 5044 §4), crc_zero those
with a zero field (CRC not in use). Exit 1 when no MPA exchange is found.
"""
import struct
import sys

POLY = 0x82F63B78
TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ POLY if c & 1 else c >> 1
    TABLE.append(c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def packets(path):
    with open(path, 'rb') as f:
        data = f.read()
    magic = struct.unpack('<I', data[:4])[0]
    if magic in (0xA1B2C3D4, 0xA1B23C4D):
        e = '<'
    else:
        e = '>'
    nano = struct.unpack(e + 'I', data[:4])[0] == 0xA1B23C4D
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack(e + 'IIII', data[off:off + 16])
        off += 16
        yield sec + frac / (1e9 if nano else 1e6), data[off:off + incl]
        off += incl


def segments(path, port):
    """(t, src_port, dst_port, seq, flags, payload) of IPv4 TCP to/from port."""
    for t, fr in packets(path):
        if len(fr) < 14:
            continue
        et = struct.unpack('>H', fr[12:14])[0]
        p = 14
        if et == 0x8100:
            et = struct.unpack('>H', fr[16:18])[0]
            p = 18
        if et != 0x0800:
            continue
        ip = fr[p:]
        ihl = (ip[0] & 15) * 4
        tot = struct.unpack('>H', ip[2:4])[0]
        if ip[9] != 6:
            continue
        tcp = ip[ihl:tot]
        sp, dp, seq = struct.unpack('>HHI', tcp[:8])
        doff = (tcp[12] >> 4) * 4
        flags = tcp[13]
        if port not in (sp, dp):
            continue
        yield t, sp, dp, seq, flags, tcp[doff:]


class Stream:
    def __init__(self):
        self.isn = None
        self.data = bytearray()
        self.have = []          # (offset, end, t)

    def add(self, seq, flags, payload, t):
        if flags & 0x02:        # SYN
            self.isn = seq
            return
        if self.isn is None or not payload:
            return
        o = (seq - self.isn - 1) & 0xFFFFFFFF
        if o > 1 << 24:
            return
        if len(self.data) < o + len(payload):
            self.data.extend(b'\0' * (o + len(payload) - len(self.data)))
        self.data[o:o + len(payload)] = payload
        self.have.append((o, o + len(payload), t))

    def when(self, off):
        ts = [t for o, e, t in self.have if o <= off < e]
        return min(ts) if ts else None


RDMAP = {0: 'write', 1: 'read_req', 2: 'read_resp', 3: 'send', 4: 'send_inv',
         5: 'send_se', 6: 'send_se_inv', 7: 'terminate', 8: 'imm', 9: 'imm_se'}


def frame(s, off):
    """An MPA request/reply at off: (description, length) or (None, 0)."""
    b = s.data
    if len(b) < off + 20 or b[off:off + 4] != b'MPA ':
        return None, 0
    flags, rev, pdl = b[off + 16], b[off + 17], struct.unpack('>H', b[off + 18:off + 20])[0]
    d = 'rev=%d flags=0x%02x pd_len=%d' % (rev, flags, pdl)
    if rev == 2 and flags & 0x10 and pdl >= 4:
        ird, ord_ = struct.unpack('>HH', b[off + 20:off + 24])
        rtr = [n for n, bit in (('write', ord_ & 0x8000), ('read', ord_ & 0x4000),
                                ('send', ird & 0x4000)) if bit]
        d += ' ird=%d ord=%d p2p=%d rtr=%s' % (ird & 0x3FFF, ord_ & 0x3FFF,
                                               1 if ird & 0x8000 else 0, ','.join(rtr) or 'none')
    return d, 20 + pdl


def fpdus(s, off, limit=2000):
    b = s.data
    n = ok = zero = bad = 0
    first = 'first=none'
    while off + 2 <= len(b) and n < limit:
        ul = struct.unpack('>H', b[off:off + 2])[0]
        pad = (4 - ((2 + ul) & 3)) & 3
        end = off + 2 + ul + pad + 4
        if end > len(b) or ul < 2:
            break
        # the CRC32c goes out least significant byte first (as both Linux
        # siw and softrnic send it)
        field = struct.unpack('<I', b[end - 4:end])[0]
        if field == 0:
            zero += 1
        elif field == crc32c(bytes(b[off:end - 4])):
            ok += 1
        else:
            bad += 1
        if n == 0:
            ctrl, rd = b[off + 2], b[off + 3]
            hl = 14 if ctrl & 0x80 else 18
            t = s.when(off)
            first = 'first=%s len=%d t=%s' % (RDMAP.get(rd & 15, 'op%d' % (rd & 15)),
                                              ul - hl, '%.6f' % t if t is not None else '?')
        n += 1
        off = end
    return 'fpdus=%d crc_ok=%d crc_zero=%d crc_bad=%d %s' % (n, ok, zero, bad, first)


def main():
    path, port = sys.argv[1], int(sys.argv[2])
    cli, srv = Stream(), Stream()
    for t, sp, dp, seq, flags, payload in segments(path, port):
        (cli if dp == port else srv).add(seq, flags, payload, t)
    req, rl = frame(cli, 0)
    rep, pl = frame(srv, 0)
    if not req or not rep:
        print('no MPA request/reply on port %d (client %d bytes, server %d bytes)'
              % (port, len(cli.data), len(srv.data)))
        return 1
    print('request:', req)
    print('reply:', rep)
    print('initiator:', fpdus(cli, rl))
    print('responder:', fpdus(srv, pl))
    return 0


if __name__ == '__main__':
    sys.exit(main())

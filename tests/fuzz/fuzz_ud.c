/* libFuzzer target for the UD datagram decoder and the GRH area codec
 * (src/wire/ud.c); tests/fuzz/run.sh builds and runs it.
 *
 * The input is one UDP datagram as chan/udp.c would receive it. Whatever
 * the decoder accepts must re-encode to the same header bytes (the
 * immediate field of a plain SEND, which the receiver ignores, aside),
 * and any 40 bytes must parse as a GRH area without harm; a GRH built
 * from what was parsed must parse back to the same addresses.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/ud.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ud_hdr h;
	ssize_t r = ud_hdr_decode(data, size, &h);

	if (r < 0) {
		CHECK(r == -EBADMSG || r == -EPROTO || r == -EMSGSIZE);
	} else {
		uint8_t out[UD_HDR_LEN];

		CHECK(r == UD_HDR_LEN && h.len == size - UD_HDR_LEN && h.len <= UD_MAX_PAYLOAD);
		CHECK(h.dst_qpn <= UD_QPN_MASK && h.src_qpn <= UD_QPN_MASK);
		CHECK(ud_hdr_encode(out, sizeof(out), &h) == UD_HDR_LEN);
		CHECK(!memcmp(out, data, 20));
		CHECK(!memcmp(out + 24, data + 24, 4));
		if (h.opcode == UD_OP_SEND_IMM)
			CHECK(!memcmp(out + 20, data + 20, 4));
	}
	if (size >= UD_GRH_LEN) {
		struct ud_grh_info g, g2;
		uint8_t grh[UD_GRH_LEN];
		int v = ud_grh_parse(data, &g);

		CHECK(v == 4 || v == 6 || v == -EPROTONOSUPPORT);
		if (v == 4 || v == 6) {
			/* An IPv4 GRH is built from IPv4-mapped GIDs only. */
			if (v == 6 && ud_gid_v4mapped(g.sgid))
				return 0;
			g.payload = 0;
			ud_grh_build(grh, &g);
			CHECK(ud_grh_parse(grh, &g2) == v);
			CHECK(!memcmp(g.sgid, g2.sgid, 16) && !memcmp(g.dgid, g2.dgid, 16));
			CHECK(g.hop_limit == g2.hop_limit && g.tclass == g2.tclass);
		}
	}
	return 0;
}

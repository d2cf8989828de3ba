/* libFuzzer target for Ethernet frame parsing and the RSS hash
 * (src/wire/eth.c); tests/fuzz/run.sh builds and runs it.
 *
 * The input is one frame as a raw packet QP could send it. Parsing must
 * never read past it; what it reports must be consistent (ports only
 * under an IP layer, one IP version at most); a shorter prefix of the
 * frame never reports a layer the whole frame lacks; and the hash of the
 * same frame is the same every time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/eth.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint8_t key[ETH_RSS_KEY_LEN] = { 0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b };
	struct eth_info f, p;
	uint8_t *copy = malloc(size ? size : 1);

	/* an exact-size heap copy, so ASan sees any read past the end */
	memcpy(copy, data, size);
	eth_parse(copy, size, &f);
	if (f.has & (ETH_HAS_TCP | ETH_HAS_UDP))
		CHECK(f.has & (ETH_HAS_IPV4 | ETH_HAS_IPV6));
	CHECK(!((f.has & ETH_HAS_IPV4) && (f.has & ETH_HAS_IPV6)));
	CHECK(!((f.has & ETH_HAS_TCP) && (f.has & ETH_HAS_UDP)));
	if (size) {
		eth_parse(copy, size - 1, &p);
		CHECK((p.has & ~f.has) == 0);
	}
	CHECK(eth_rss_hash(&f, 0xff, key, sizeof(key)) == eth_rss_hash(&f, 0xff, key, sizeof(key)));
	free(copy);
	return 0;
}

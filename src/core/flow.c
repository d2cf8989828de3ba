/* Flow steering rules and the port switch (ibv_create_flow(3)).
 *
 * The switch is one list per process of every flow rule, kept sorted by
 * priority (lower value first: it takes precedence). A frame is offered
 * to the rules in that order:
 *   - a SNIFFER rule gets every frame;
 *   - a NORMAL rule whose specs all match gets it, unless a rule of a
 *     better priority already took it ("trapped" it); a rule with
 *     IBV_FLOW_ATTR_FLAGS_DONT_TRAP takes a copy without trapping, so
 *     rules after it still see the frame; rules of the same priority as
 *     the trapping one all get a copy (the frame is replicated, as a NIC
 *     does for several QPs attached to one multicast address);
 *   - when no NORMAL rule trapped the frame, ALL_DEFAULT rules get it and
 *     MC_DEFAULT rules get it if its destination MAC is multicast.
 * A QP gets at most one copy of a frame, however many of its rules match.
 *
 * Rules hold their QP busy (destroying it is EBUSY while a rule is
 * attached), so the list lock alone keeps every QP it names alive:
 * frames are delivered under the read lock.
 */
#include "core/raw.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct flow_spec {
	uint32_t type;			/* IBV_FLOW_SPEC_* */
	uint32_t len;			/* bytes of val/mask compared */
	uint8_t val[40], mask[40];
};

struct sr_flow {
	struct ibv_flow ibflow;
	struct sr_qp *qp;
	struct sr_list link;		/* in sw.flows, by priority */
	uint32_t type;			/* enum ibv_flow_attr_type */
	uint16_t priority;
	bool dont_trap;
	uint32_t nspecs;
	struct flow_spec specs[SR_MAX_FLOW_SPECS];
};

static struct {
	pthread_rwlock_t lock;
	struct sr_list flows;
	uint32_t n;
	uint32_t next_handle;
} sw = {
	.lock = PTHREAD_RWLOCK_INITIALIZER,
	.flows = { &sw.flows, &sw.flows },
};

struct ibv_flow *flow_ib(struct sr_flow *fl) { return &fl->ibflow; }
struct sr_flow *to_flow(struct ibv_flow *f) { return container_of(f, struct sr_flow, ibflow); }

/* Where a spec type keeps its value and mask filters, and how many bytes
 * of each are compared. The compared length stops at the last field, so
 * the IPv6 filter's tail padding (whatever a program left in it) never
 * decides a match. */
struct spec_layout {
	size_t size, val, mask, len;
};

#define LAYOUT(st, flen) \
	(struct spec_layout){ sizeof(struct st), offsetof(struct st, val), \
			      offsetof(struct st, mask), flen }

static int spec_layout(uint32_t type, struct spec_layout *l)
{
	switch (type) {
	case IBV_FLOW_SPEC_ETH:
		*l = LAYOUT(ibv_flow_spec_eth, sizeof(struct ibv_flow_eth_filter));
		return 0;
	case IBV_FLOW_SPEC_IPV4:
		*l = LAYOUT(ibv_flow_spec_ipv4, sizeof(struct ibv_flow_ipv4_filter));
		return 0;
	case IBV_FLOW_SPEC_IPV4_EXT:
		*l = LAYOUT(ibv_flow_spec_ipv4_ext,
			    sizeof(struct ibv_flow_ipv4_ext_filter));
		return 0;
	case IBV_FLOW_SPEC_IPV6:
		*l = LAYOUT(ibv_flow_spec_ipv6,
			    offsetof(struct ibv_flow_ipv6_filter, hop_limit) + 1);
		return 0;
	case IBV_FLOW_SPEC_TCP:
	case IBV_FLOW_SPEC_UDP:
		*l = LAYOUT(ibv_flow_spec_tcp_udp,
			    sizeof(struct ibv_flow_tcp_udp_filter));
		return 0;
	default:
		/* inner headers, tunnels, ESP, MPLS, actions: not emulated */
		return -EOPNOTSUPP;
	}
}

/* The specs follow the attribute, each starting with its type and size
 * (ibv_flow_spec's hdr) and announcing its own size. */
static int flow_parse_specs(struct sr_flow *fl, const struct ibv_flow_attr *attr)
{
	const uint8_t *p = (const uint8_t *)(attr + 1);

	if (attr->num_of_specs > SR_MAX_FLOW_SPECS)
		return -EINVAL;
	for (uint32_t i = 0; i < attr->num_of_specs; i++) {
		struct { enum ibv_flow_spec_type type; uint16_t size; } hdr;
		struct flow_spec *s = &fl->specs[i];
		struct spec_layout l;
		int ret;

		memcpy(&hdr, p, sizeof(hdr));
		ret = spec_layout(hdr.type, &l);
		if (ret)
			return ret;
		if (hdr.size != l.size)
			return -EINVAL;
		s->type = hdr.type;
		s->len = (uint32_t)l.len;
		memcpy(s->val, p + l.val, l.len);
		memcpy(s->mask, p + l.mask, l.len);
		p += l.size;
	}
	fl->nspecs = attr->num_of_specs;
	return 0;
}

/* The frame's fields laid out as the spec's filter, for a masked
 * compare; false if the frame lacks the layer the spec names. */
static bool frame_filter(uint32_t type, const struct eth_info *f, uint8_t *out)
{
	memset(out, 0, 40);
	switch (type) {
	case IBV_FLOW_SPEC_ETH: {
		struct ibv_flow_eth_filter e;

		memcpy(e.dst_mac, f->dmac, 6);
		memcpy(e.src_mac, f->smac, 6);
		e.ether_type = f->ether_type;
		e.vlan_tag = f->vlan_tag;
		memcpy(out, &e, sizeof(e));
		return true;
	}
	case IBV_FLOW_SPEC_IPV4:
	case IBV_FLOW_SPEC_IPV4_EXT: {
		struct ibv_flow_ipv4_ext_filter e = {
			.src_ip = f->ip4_src, .dst_ip = f->ip4_dst, .proto = f->ip4_proto,
			.tos = f->ip4_tos, .ttl = f->ip4_ttl, .flags = f->ip4_flags,
		};

		memcpy(out, &e, sizeof(e));
		return f->has & ETH_HAS_IPV4;
	}
	case IBV_FLOW_SPEC_IPV6: {
		struct ibv_flow_ipv6_filter e;

		memset(&e, 0, sizeof(e));
		memcpy(e.src_ip, f->ip6_src, 16);
		memcpy(e.dst_ip, f->ip6_dst, 16);
		e.flow_label = f->ip6_flow;
		e.next_hdr = f->ip6_next;
		e.traffic_class = f->ip6_tclass;
		e.hop_limit = f->ip6_hop;
		memcpy(out, &e, sizeof(e));
		return f->has & ETH_HAS_IPV6;
	}
	case IBV_FLOW_SPEC_TCP:
	case IBV_FLOW_SPEC_UDP: {
		struct ibv_flow_tcp_udp_filter e = { .dst_port = f->dport, .src_port = f->sport };

		memcpy(out, &e, sizeof(e));
		return f->has & (type == IBV_FLOW_SPEC_TCP ? ETH_HAS_TCP : ETH_HAS_UDP);
	}
	default:
		return false;
	}
}

/* A spec names its layer even with an all-zero mask: an IPv4 spec matches
 * IPv4 frames only (as mlx5 steering implies the ethertype). */
static bool flow_matches(const struct sr_flow *fl, const struct eth_info *f)
{
	uint8_t got[40];

	for (uint32_t i = 0; i < fl->nspecs; i++) {
		const struct flow_spec *s = &fl->specs[i];

		if (!frame_filter(s->type, f, got))
			return false;
		for (uint32_t b = 0; b < s->len; b++)
			if ((got[b] ^ s->val[b]) & s->mask[b])
				return false;
	}
	return true;
}

static int flow_check_attr(struct sr_qp *qp, const struct ibv_flow_attr *attr)
{
	if (qp->ibqp.qp_base.qp_type != IBV_QPT_RAW_PACKET || !qp->raw)
		return -EOPNOTSUPP;	/* flows on UD QPs are an IB feature */
	if (attr->comp_mask || attr->port != 1)
		return -EINVAL;
	if (attr->flags & ~(uint32_t)(IBV_FLOW_ATTR_FLAGS_DONT_TRAP | IBV_FLOW_ATTR_FLAGS_EGRESS))
		return -EINVAL;
	if (attr->flags & IBV_FLOW_ATTR_FLAGS_EGRESS)
		return -EOPNOTSUPP;	/* no egress steering */
	switch (attr->type) {
	case IBV_FLOW_ATTR_NORMAL:
		return 0;
	case IBV_FLOW_ATTR_ALL_DEFAULT:
	case IBV_FLOW_ATTR_MC_DEFAULT:
	case IBV_FLOW_ATTR_SNIFFER:
		/* these match by kind, not by specs */
		return attr->num_of_specs ? -EINVAL : 0;
	default:
		return -EINVAL;
	}
}

int flow_create(struct sr_qp *qp, const struct ibv_flow_attr *attr, struct sr_flow **out)
{
	struct sr_flow *fl;
	struct sr_list *pos;
	int ret;

	if (!raw_cap_net_raw())
		return -EPERM;
	ret = flow_check_attr(qp, attr);
	if (ret)
		return ret;
	fl = calloc(1, sizeof(*fl));
	if (!fl)
		return -ENOMEM;
	ret = flow_parse_specs(fl, attr);
	if (ret) {
		free(fl);
		return ret;
	}
	fl->qp = qp;
	fl->type = attr->type;
	fl->priority = attr->priority;
	fl->dont_trap = attr->flags & IBV_FLOW_ATTR_FLAGS_DONT_TRAP;
	fl->ibflow.context = qp->ibqp.qp_base.context;

	pthread_rwlock_wrlock(&sw.lock);
	if (sw.n >= SR_MAX_FLOWS) {
		pthread_rwlock_unlock(&sw.lock);
		free(fl);
		return -ENOMEM;
	}
	fl->ibflow.handle = ++sw.next_handle;
	/* after every rule of the same or a better priority: a later rule
	 * never overtakes an earlier one of the same priority */
	for (pos = sw.flows.next; pos != &sw.flows; pos = pos->next)
		if (container_of(pos, struct sr_flow, link)->priority > fl->priority)
			break;
	sr_list_add_tail(pos, &fl->link);
	sw.n++;
	atomic_fetch_add(&qp->raw->nflows, 1);
	pthread_rwlock_unlock(&sw.lock);
	sr_dbg("flow %u on QP %#x: type %u priority %u, %u specs", fl->ibflow.handle,
	       qp->ibqp.qp_base.qp_num, fl->type, fl->priority, fl->nspecs);
	*out = fl;
	return 0;
}

int flow_destroy(struct sr_flow *fl)
{
	pthread_rwlock_wrlock(&sw.lock);
	sr_list_del(&fl->link);
	sw.n--;
	atomic_fetch_sub(&fl->qp->raw->nflows, 1);
	pthread_rwlock_unlock(&sw.lock);
	free(fl);
	return 0;
}

/* The QPs a frame goes to, each once. */
struct fanout {
	struct sr_qp *qp[64];
	uint32_t n;
	bool overflow;
};

static void fanout_add(struct fanout *o, struct sr_qp *qp)
{
	for (uint32_t i = 0; i < o->n; i++)
		if (o->qp[i] == qp)
			return;
	if (o->n < ARRAY_SIZE(o->qp))
		o->qp[o->n++] = qp;
	else
		o->overflow = true;	/* counted in the debug log only */
}

static void switch_select(const struct eth_info *f, struct fanout *o)
{
	struct sr_list *pos;
	bool trapped = false;
	uint16_t trap_prio = 0;

	for (pos = sw.flows.next; pos != &sw.flows; pos = pos->next) {
		struct sr_flow *fl = container_of(pos, struct sr_flow, link);

		if (fl->type == IBV_FLOW_ATTR_SNIFFER) {
			fanout_add(o, fl->qp);
			continue;
		}
		if (fl->type != IBV_FLOW_ATTR_NORMAL)
			continue;
		if (trapped && fl->priority > trap_prio)
			continue;
		if (!flow_matches(fl, f))
			continue;
		fanout_add(o, fl->qp);
		if (!fl->dont_trap && !trapped) {
			trapped = true;
			trap_prio = fl->priority;
		}
	}
	if (trapped)
		return;
	for (pos = sw.flows.next; pos != &sw.flows; pos = pos->next) {
		struct sr_flow *fl = container_of(pos, struct sr_flow, link);

		if (fl->type == IBV_FLOW_ATTR_ALL_DEFAULT ||
		    (fl->type == IBV_FLOW_ATTR_MC_DEFAULT && eth_is_multicast(f)))
			fanout_add(o, fl->qp);
	}
}

void raw_switch(const uint8_t *frame, uint32_t len)
{
	struct eth_info f;
	struct fanout o;

	eth_parse(frame, len, &f);
	o.n = 0;
	o.overflow = false;
	pthread_rwlock_rdlock(&sw.lock);
	switch_select(&f, &o);
	for (uint32_t i = 0; i < o.n; i++)
		raw_qp_rx(o.qp[i], frame, len, &f);
	pthread_rwlock_unlock(&sw.lock);
	if (o.overflow)
		sr_dbg("raw switch: a frame matched more than %zu QPs; the rest missed it",
		       ARRAY_SIZE(o.qp));
}

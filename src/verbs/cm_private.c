/* SOFTRNIC_PRIVATE_1: what librdmacm.so.1 needs beyond the public verbs
 * (softrnic_private.h). Thin: find the QP by number, call the TCP channel. */
#include "verbs/softrnic_private.h"
#include "core/qp.h"

#include <errno.h>

SR_EXPORT int softrnic_qp_set_cm(uint32_t qpn)
{
	struct sr_qp *qp = ctx_find_qp(qpn);

	if (!qp)
		return -ENOENT;
	sr_mutex_lock(&qp->lock);
	qp->cm = true;
	sr_mutex_unlock(&qp->lock);
	qp_put(qp);
	return 0;
}

SR_EXPORT int softrnic_stream_attach(uint32_t qpn, const struct softrnic_stream_attr *a,
				     struct softrnic_stream **out)
{
	struct chan_cm_params p = {
		.fd = a->fd, .crc = a->crc, .ext = a->ext, .plain = a->plain, .responder = a->responder,
		.rtr_wait = a->rtr_wait,
		.ird = a->ird, .ord = a->ord, .rx = a->rx, .rx_len = a->rx_len, .ended = a->ended, .arg = a->arg,
	};
	struct sr_qp *qp = ctx_find_qp(qpn);
	struct sr_chan *ch = NULL;
	int ret;

	if (!qp)
		return -ENOENT;
	/* RC, UC, and either half of XRC (the CM connects an XRC_SEND QP
	 * to an XRC_RECV QP as it does two RC QPs) */
	if (!qp_type_reliable(qp_type(qp)) && qp_type(qp) != IBV_QPT_UC)
		ret = -EINVAL;
	else
		ret = chan_tcp_cm_attach(qp, &p, &ch);
	qp_put(qp);
	*out = (struct softrnic_stream *)ch;
	return ret;
}

SR_EXPORT void softrnic_stream_disconnect(struct softrnic_stream *s)
{
	if (s)
		chan_tcp_cm_disconnect((struct sr_chan *)s);
}

SR_EXPORT void softrnic_stream_release(struct softrnic_stream *s)
{
	if (s)
		chan_tcp_cm_release((struct sr_chan *)s);
}

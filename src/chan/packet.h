/* The packet channel: the port switch's uplink (DESIGN.md decision 20).
 *
 * With SOFTRNIC_RAW_IF naming a network interface, every frame a raw
 * packet QP of this process sends also leaves on that interface through
 * one AF_PACKET socket per process, and every frame that arrives on it
 * (from another process or host) is offered to this process's flow rules
 * like a local one. Unset, raw packet QPs reach the QPs of their own
 * process only: the suite's frames carry made-up addresses, and nothing
 * should put them on a real network unasked.
 *
 * On a loopback interface a process sees its own frames come back in; a
 * frame this process sent recently (by a fingerprint of its bytes) is
 * recognised and not delivered a second time.
 */
#ifndef SOFTRNIC_CHAN_PACKET_H
#define SOFTRNIC_CHAN_PACKET_H

#include <stdbool.h>
#include <stdint.h>

/* A raw packet QP was created: open the socket and its receive thread
 * at the first (refcounted). Returns true if frames now go out on the
 * interface; false if SOFTRNIC_RAW_IF is unset or the interface cannot be
 * used (warned once), and the QP stays within the process. */
bool chan_packet_get(void);
/* The QP that got it is destroyed: the last one closes the socket and
 * joins the thread. */
void chan_packet_put(void);
/* Put one frame on the interface (best effort: a frame the interface
 * refuses, above its MTU say, is lost and counted, as a NIC drops it). */
void chan_packet_send(const uint8_t *frame, uint32_t len);

#endif

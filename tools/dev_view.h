/* `softrnic run`'s /dev view: /dev/infiniband/uverbsN (tools/dev_view.c). */
#ifndef SOFTRNIC_TOOLS_DEV_VIEW_H
#define SOFTRNIC_TOOLS_DEV_VIEW_H

#include <stddef.h>

/*
 * In the calling process's own mount namespace (sysfs_view.c made it),
 * makes /dev/infiniband/NAME a character device for each of the n uverbs
 * names (what /sys/class/infiniband_verbs lists). Nodes that are
 * character devices already are left alone. Returns 0 when every node is
 * in place; otherwise -1, /dev is as it was, and the reason is printed
 * when SOFTRNIC_DEBUG >= 1.
 */
int dev_view_build(char *const *names, size_t n);

#endif

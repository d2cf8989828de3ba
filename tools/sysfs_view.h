/* `softrnic run`'s sysfs view of softrnic0 (tools/sysfs_view.c). */
#ifndef SOFTRNIC_TOOLS_SYSFS_VIEW_H
#define SOFTRNIC_TOOLS_SYSFS_VIEW_H

/*
 * Puts the calling process (single-threaded, about to exec) in a mount
 * namespace of its own, in which /sys/class also holds infiniband/softrnic0
 * and infiniband_verbs/uverbs0 as libdir's libibverbs.so.1 reports them,
 * and /dev/infiniband/uverbs0 is a character device (dev_view.c; a failure
 * there leaves /dev as it was and the sysfs view in place). Returns 0 when
 * the view is in place; otherwise the process is left as it was (or, if a
 * later step failed, in a namespace that still shows the real /sys) and
 * the reason is printed when SOFTRNIC_DEBUG >= 1. Never fatal: the program
 * runs either way.
 */
int sysfs_view_setup(const char *libdir);

#endif

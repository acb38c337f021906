/* nodeforge lab: what the five stand-in NVIDIA kernel modules share (README.md). NV_VERSION (the driver version)
 * and NV_OPEN (1: the open kernel modules, 0: the proprietary ones) come from the make command line. */
#include <linux/init.h>
#include <linux/kernel.h>
#include <linux/module.h>

#ifndef NV_VERSION
#error "NV_VERSION is not set (make NV_VERSION=580.105.08 NV_OPEN=1)"
#endif

#if NV_OPEN
#define NV_LICENSE "Dual MIT/GPL"
#define NV_ID "NVIDIA UNIX Open Kernel Module for x86_64"
#else
#define NV_LICENSE "NVIDIA"
#define NV_ID "NVIDIA UNIX x86_64 Kernel Module"
#endif

/* Each module says when it goes, so that the unload order can be read back from the kernel log. */
#define NV_STANDIN_MODULE(desc)                                                                                      \
	static int __init nv_standin_module_init(void)                                                               \
	{                                                                                                            \
		int rc = nv_standin_init();                                                                          \
		if (rc == 0)                                                                                         \
			pr_info("nodeforge stand-in: loaded %s %s\n", KBUILD_MODNAME, NV_VERSION);                  \
		return rc;                                                                                           \
	}                                                                                                            \
	static void __exit nv_standin_module_exit(void)                                                              \
	{                                                                                                            \
		nv_standin_exit();                                                                                   \
		pr_info("nodeforge stand-in: unloaded %s %s\n", KBUILD_MODNAME, NV_VERSION);                        \
	}                                                                                                            \
	module_init(nv_standin_module_init);                                                                         \
	module_exit(nv_standin_module_exit);                                                                         \
	MODULE_LICENSE(NV_LICENSE);                                                                                  \
	MODULE_VERSION(NV_VERSION);                                                                                  \
	MODULE_DESCRIPTION("nodeforge stand-in for the NVIDIA driver's " desc)

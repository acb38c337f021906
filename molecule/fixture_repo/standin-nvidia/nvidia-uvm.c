/* nodeforge stand-in for nvidia-uvm.ko: imports nvUvmInterfaceRegisterUvmCallbacks from nvidia.ko, as the real module does, so modprobe loads
 * nvidia first and nvidia cannot go while nvidia-uvm is loaded. */
#include "nv-standin.h"

extern int nvUvmInterfaceRegisterUvmCallbacks(void);

static int nv_standin_init(void)
{
	return nvUvmInterfaceRegisterUvmCallbacks();
}

static void nv_standin_exit(void)
{
}

NV_STANDIN_MODULE("unified memory module (nvidia-uvm.ko)");

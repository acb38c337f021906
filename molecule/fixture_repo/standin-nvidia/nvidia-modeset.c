/* nodeforge stand-in for nvidia-modeset.ko: imports nvidia_get_rm_ops from nvidia.ko, as the real module does, so modprobe loads
 * nvidia first and nvidia cannot go while nvidia-modeset is loaded. */
#include "nv-standin.h"

extern int nvidia_get_rm_ops(void);

int nvKmsKapiGetFunctionsTable(void)
{
	return 0;
}
EXPORT_SYMBOL(nvKmsKapiGetFunctionsTable);

static int nv_standin_init(void)
{
	return nvidia_get_rm_ops();
}

static void nv_standin_exit(void)
{
}

NV_STANDIN_MODULE("modesetting module (nvidia-modeset.ko)");

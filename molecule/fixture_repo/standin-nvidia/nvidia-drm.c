/* nodeforge stand-in for nvidia-drm.ko: imports nvKmsKapiGetFunctionsTable from nvidia-modeset.ko, as the real
 * module does, so modprobe loads nvidia-modeset (and so nvidia) first. */
#include "nv-standin.h"

extern int nvKmsKapiGetFunctionsTable(void);

static int nv_standin_init(void)
{
	return nvKmsKapiGetFunctionsTable();
}

static void nv_standin_exit(void)
{
}

NV_STANDIN_MODULE("DRM module (nvidia-drm.ko)");

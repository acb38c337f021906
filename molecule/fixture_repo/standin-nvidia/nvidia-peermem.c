/* nodeforge stand-in for nvidia-peermem.ko: imports nvidia_p2p_get_pages from nvidia.ko, as the real module does, so modprobe loads
 * nvidia first and nvidia cannot go while nvidia-peermem is loaded. */
#include "nv-standin.h"

extern int nvidia_p2p_get_pages(void);

static int nv_standin_init(void)
{
	return nvidia_p2p_get_pages();
}

static void nv_standin_exit(void)
{
}

NV_STANDIN_MODULE("GPUDirect RDMA peer memory module (nvidia-peermem.ko)");

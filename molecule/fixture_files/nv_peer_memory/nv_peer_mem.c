// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * nodeforge fixture standing in for Mellanox nv_peer_memory's nv_peer_mem.c (see README.md): a real module that
 * builds only against MLNX_OFED's peer memory header and the NVIDIA driver's nv-p2p.h. It registers nothing.
 */
#include <linux/init.h>
#include <linux/module.h>
#include <rdma/peer_mem.h>
#include "nv-p2p.h"

#ifndef NVIDIA_P2P_PAGE_TABLE_VERSION
#error "nv-p2p.h does not declare the NVIDIA P2P API"
#endif

#define DRV_NAME	"nv_mem"
#define DRV_VERSION	"1.3-0"

MODULE_AUTHOR("nodeforge fixture");
MODULE_DESCRIPTION("Stand-in for the NVIDIA GPU memory plug-in to Mellanox ib_core peer memory");
MODULE_LICENSE("Dual BSD/GPL");
MODULE_VERSION(DRV_VERSION);
MODULE_SOFTDEP("pre: nvidia");
#ifdef NVIDIA_STANDIN_DRIVER_VERSION
MODULE_INFO(nv_p2p_h, "driver " NVIDIA_STANDIN_DRIVER_VERSION);
#else
MODULE_INFO(nv_p2p_h, "compat");
#endif

static char nv_mem_name[IB_PEER_MEMORY_NAME_MAX] = DRV_NAME;

static int __init nv_mem_client_init(void)
{
	pr_info("%s %s: fixture module, no peer memory client registered\n", nv_mem_name, DRV_VERSION);
	return 0;
}

static void __exit nv_mem_client_cleanup(void)
{
}

module_init(nv_mem_client_init);
module_exit(nv_mem_client_cleanup);

/* nodeforge stand-in for MLNX_OFED's include/rdma/peer_mem.h (the ib_core peer memory API). */
#ifndef RDMA_PEER_MEM_H
#define RDMA_PEER_MEM_H

#define IB_PEER_MEMORY_NAME_MAX 64
#define IB_PEER_MEMORY_VER_MAX 16

#endif

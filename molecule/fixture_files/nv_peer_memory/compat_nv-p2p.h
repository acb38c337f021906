/* nodeforge fixture: the fallback nv_peer_memory ships for systems without the driver's nv-p2p.h. */
#ifndef _NV_P2P_H_
#define _NV_P2P_H_
#define NVIDIA_P2P_PAGE_TABLE_VERSION 0x00010002
struct nvidia_p2p_page_table;
#endif

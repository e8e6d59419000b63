/* The fake Level Zero loader itself: device memory faults on the CPU, copies are exact,
 * command lists order by barriers and events, lost devices, IPC across processes.
 * Each Criterion test runs in its own process, so FAKEGPU_* set before zeInit apply.
 * This file: enumeration and memory; test_fakeze_lists.c: copies, events, lost
 * devices; test_fakeze_ipc.c: IPC and the loader generation. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <level_zero/ze_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fakeze.h"
#include "test_fakeze.h"

/* ----------------------------------------------------------- enumeration */

Test(fakeze, uninitialized_until_zeInit) {
  uint32_t n = 0;
  cr_assert_eq(zeDriverGet(&n, NULL), ZE_RESULT_ERROR_UNINITIALIZED);
  ZE_OK(zeInit(ZE_INIT_FLAG_GPU_ONLY));
  ZE_OK(zeDriverGet(&n, NULL));
  cr_assert_eq(n, 1);
}

Test(fakeze, no_device_gives_no_driver) {
  setenv("FAKEGPU_ZE_NO_DEVICE", "1", 1);
  ZE_OK(zeInit(ZE_INIT_FLAG_GPU_ONLY));
  uint32_t n = 5;
  ze_driver_handle_t d[5];
  ZE_OK(zeDriverGet(&n, d));
  cr_assert_eq(n, 0);
}

Test(fakeze, no_device_init_fails) {
  setenv("FAKEGPU_ZE_NO_DEVICE", "init", 1);
  cr_assert_eq(zeInit(ZE_INIT_FLAG_GPU_ONLY), ZE_RESULT_ERROR_UNINITIALIZED);
}

Test(fakeze, devices_and_properties) {
  setenv("FAKEGPU_GPUS", "3", 1);
  fx_t f;
  fx_init(&f);
  cr_assert_eq(f.ndev, 3);
  uint32_t n = 0;
  ZE_OK(zeDeviceGet(f.drv, &n, NULL));
  cr_assert_eq(n, 3);
  n = 2; /* fewer than there are: only two written */
  ze_device_handle_t two[3] = {0};
  ZE_OK(zeDeviceGet(f.drv, &n, two));
  cr_assert_eq(n, 2);
  cr_assert_null(two[2]);
  uint8_t uuids[3][16];
  for (uint32_t i = 0; i < 3; i++) {
    ze_device_properties_t p = {.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES};
    ZE_OK(zeDeviceGetProperties(f.dev[i], &p));
    cr_assert_eq(p.type, ZE_DEVICE_TYPE_GPU);
    cr_assert_str_eq(p.name, "unilink fake Xe GPU");
    cr_assert_eq(p.vendorId, 0x8086);
    cr_assert_eq(p.flags & ZE_DEVICE_PROPERTY_FLAG_SUBDEVICE, 0);
    memcpy(uuids[i], p.uuid.id, 16);
    ze_pci_ext_properties_t pci = {.stype = ZE_STRUCTURE_TYPE_PCI_EXT_PROPERTIES};
    ZE_OK(zeDevicePciGetPropertiesExt(f.dev[i], &pci));
    cr_assert_eq(pci.address.bus, 0x18 + 0x10 * i);
    uint32_t ns = 7;
    ZE_OK(zeDeviceGetSubDevices(f.dev[i], &ns, NULL));
    cr_assert_eq(ns, 0);
  }
  cr_assert_neq(memcmp(uuids[0], uuids[1], 16), 0);
  cr_assert_neq(memcmp(uuids[1], uuids[2], 16), 0);
  uint32_t ng = 0;
  ZE_OK(zeDeviceGetCommandQueueGroupProperties(f.dev[0], &ng, NULL));
  cr_assert_eq(ng, 2);
  ze_command_queue_group_properties_t g[2] = {{.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES},
                                              {.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES}};
  ZE_OK(zeDeviceGetCommandQueueGroupProperties(f.dev[0], &ng, g));
  cr_assert(g[0].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE);
  cr_assert(g[0].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY);
  cr_assert_eq(g[1].flags, ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY);
  ze_api_version_t v = 0;
  ZE_OK(zeDriverGetApiVersion(f.drv, &v));
  cr_assert_eq(v, ZE_API_VERSION_CURRENT);
  void *fn = (void *)1;
  cr_assert_eq(zeDriverGetExtensionFunctionAddress(f.drv, "zeMemGetIpcHandleFromFileDescriptorExp", &fn),
               ZE_RESULT_ERROR_UNSUPPORTED_FEATURE);
  cr_assert_null(fn);
  fx_fini(&f);
}

Test(fakeze, no_copy_engine_option) {
  setenv("FAKEGPU_ZE_COPY_ENGINE", "0", 1);
  fx_t f;
  fx_init(&f);
  uint32_t ng = 0;
  ZE_OK(zeDeviceGetCommandQueueGroupProperties(f.dev[0], &ng, NULL));
  cr_assert_eq(ng, 1);
  ze_command_queue_desc_t qd = {ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, NULL, 1, 0, 0,
                                ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
  ze_command_list_handle_t l = NULL;
  cr_assert_eq(zeCommandListCreateImmediate(f.ctx, f.dev[0], &qd, &l), ZE_RESULT_ERROR_INVALID_ARGUMENT);
  fx_fini(&f);
}

Test(fakeze, sub_devices) {
  setenv("FAKEGPU_GPUS", "2", 1);
  setenv("FAKEGPU_ZE_SUBDEVICES", "2", 1);
  setenv("FAKEGPU_P2P", "no", 1);
  fx_t f;
  fx_init(&f);
  cr_assert_eq(f.ndev, 2);
  ze_device_handle_t s0[2], s1[2];
  uint32_t n = 2;
  ZE_OK(zeDeviceGetSubDevices(f.dev[0], &n, s0));
  cr_assert_eq(n, 2);
  ZE_OK(zeDeviceGetSubDevices(f.dev[1], &n, s1));
  ze_device_properties_t p = {.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES};
  ZE_OK(zeDeviceGetProperties(s1[1], &p));
  cr_assert(p.flags & ZE_DEVICE_PROPERTY_FLAG_SUBDEVICE);
  cr_assert_eq(p.subdeviceId, 1);
  ze_bool_t can = 0;
  ZE_OK(zeDeviceCanAccessPeer(s0[0], s0[1], &can)); /* sibling tiles: always */
  cr_assert_eq(can, 1);
  ZE_OK(zeDeviceCanAccessPeer(s0[0], f.dev[0], &can)); /* tile and its parent */
  cr_assert_eq(can, 1);
  ZE_OK(zeDeviceCanAccessPeer(s0[0], s1[0], &can)); /* other card, no P2P */
  cr_assert_eq(can, 0);
  fx_fini(&f);
}

Test(fakeze, peer_access_and_fabric) {
  setenv("FAKEGPU_GPUS", "3", 1);
  setenv("FAKEGPU_P2P", "0-1", 1);
  fx_t f;
  fx_init(&f);
  ze_bool_t can = 9;
  ZE_OK(zeDeviceCanAccessPeer(f.dev[0], f.dev[1], &can));
  cr_assert_eq(can, 1);
  ZE_OK(zeDeviceCanAccessPeer(f.dev[1], f.dev[0], &can));
  cr_assert_eq(can, 1);
  ZE_OK(zeDeviceCanAccessPeer(f.dev[0], f.dev[2], &can));
  cr_assert_eq(can, 0);
  ZE_OK(zeDeviceCanAccessPeer(f.dev[2], f.dev[2], &can));
  cr_assert_eq(can, 1);
  ze_device_p2p_bandwidth_exp_properties_t bw = {.stype = ZE_STRUCTURE_TYPE_DEVICE_P2P_BANDWIDTH_EXP_PROPERTIES};
  ze_device_p2p_properties_t pp = {.stype = ZE_STRUCTURE_TYPE_DEVICE_P2P_PROPERTIES, .pNext = &bw};
  ZE_OK(zeDeviceGetP2PProperties(f.dev[0], f.dev[1], &pp));
  cr_assert(pp.flags & ZE_DEVICE_P2P_PROPERTY_FLAG_ACCESS);
  cr_assert_gt(bw.logicalBandwidth, 0);
  ZE_OK(zeDeviceGetP2PProperties(f.dev[0], f.dev[2], &pp));
  cr_assert_eq(pp.flags, 0);
  cr_assert_eq(bw.logicalBandwidth, 0);
  ze_fabric_vertex_handle_t v0, v1, v2;
  ZE_OK(zeDeviceGetFabricVertexExp(f.dev[0], &v0));
  ZE_OK(zeDeviceGetFabricVertexExp(f.dev[1], &v1));
  ZE_OK(zeDeviceGetFabricVertexExp(f.dev[2], &v2));
  uint32_t ne = 0;
  ZE_OK(zeFabricEdgeGetExp(v0, v1, &ne, NULL));
  cr_assert_eq(ne, 1);
  ze_fabric_edge_handle_t e;
  ZE_OK(zeFabricEdgeGetExp(v1, v0, &ne, &e));
  ze_fabric_edge_exp_properties_t ep = {.stype = ZE_STRUCTURE_TYPE_FABRIC_EDGE_EXP_PROPERTIES};
  ZE_OK(zeFabricEdgeGetPropertiesExp(e, &ep));
  cr_assert_str_eq(ep.model, "fake XeLink");
  cr_assert_eq(ep.bandwidthUnit, ZE_BANDWIDTH_UNIT_BYTES_PER_NANOSEC);
  ne = 0;
  ZE_OK(zeFabricEdgeGetExp(v0, v2, &ne, NULL));
  cr_assert_eq(ne, 0);
  fx_fini(&f);
}

/* ------------------------------------------------------------------ memory */

Test(fakeze, cpu_access_to_device_memory_faults) {
  fx_t f;
  fx_init(&f);
  char *d = fx_dev_alloc(&f, 0, 8192);
  touch_in_child(d, 1);
  touch_in_child(d + 5000, 0);
  char *h = fx_host_alloc(&f, 64); /* host memory: the CPU may touch it */
  h[0] = 1;
  ZE_OK(zeMemFree(f.ctx, d));
  ZE_OK(zeMemFree(f.ctx, h));
  fx_fini(&f);
}

Test(fakeze, allocation_properties) {
  fx_t f;
  fx_init(&f);
  char *d = fx_dev_alloc(&f, 2, 1000);
  char *h = fx_host_alloc(&f, 300);
  cr_assert_eq(fakeze_live_allocations(), 2);
  ze_memory_allocation_properties_t p = {.stype = ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES};
  ze_device_handle_t dh = NULL;
  ZE_OK(zeMemGetAllocProperties(f.ctx, d + 10, &p, &dh));
  cr_assert_eq(p.type, ZE_MEMORY_TYPE_DEVICE);
  cr_assert_eq(dh, f.dev[2]);
  uint64_t did = p.id;
  ZE_OK(zeMemGetAllocProperties(f.ctx, h + 299, &p, &dh));
  cr_assert_eq(p.type, ZE_MEMORY_TYPE_HOST);
  cr_assert_null(dh);
  cr_assert_neq(p.id, did);
  int stack = 0;
  ZE_OK(zeMemGetAllocProperties(f.ctx, &stack, &p, &dh));
  cr_assert_eq(p.type, ZE_MEMORY_TYPE_UNKNOWN);
  ZE_OK(zeMemGetAllocProperties(f.ctx, d + 1000, &p, NULL)); /* one past the end */
  cr_assert_eq(p.type, ZE_MEMORY_TYPE_UNKNOWN);
  void *base = NULL;
  size_t size = 0;
  ZE_OK(zeMemGetAddressRange(f.ctx, d + 999, &base, &size));
  cr_assert_eq(base, d);
  cr_assert_eq(size, 1000);
  ZE_OK(zeMemGetAddressRange(f.ctx, h + 1, &base, &size));
  cr_assert_eq(base, h);
  cr_assert_eq(size, 300);
  cr_assert_eq(zeMemGetAddressRange(f.ctx, &stack, &base, &size), ZE_RESULT_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(zeMemFree(f.ctx, d + 1), ZE_RESULT_ERROR_INVALID_ARGUMENT);
  ZE_OK(zeMemFree(f.ctx, d));
  cr_assert_eq(zeMemFree(f.ctx, d), ZE_RESULT_ERROR_INVALID_ARGUMENT); /* twice */
  ZE_OK(zeMemFree(f.ctx, h));
  cr_assert_eq(fakeze_live_allocations(), 0);
  ze_device_mem_alloc_desc_t dd = {ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, NULL, 0, 0};
  void *x = NULL;
  cr_assert_eq(zeMemAllocDevice(f.ctx, &dd, 0, 0, f.dev[0], &x), ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
  cr_assert_eq(zeMemAllocDevice(f.ctx, &dd, 64, 3, f.dev[0], &x), ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT);
  fx_fini(&f);
}

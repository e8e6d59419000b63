/* Introspection of the fake Level Zero loader (tests only; see README.md).
 *
 * The fake libze_loader.so.1 exports these next to the ze* entry points, so a test that
 * runs the shipped ze plugin through it can check what the plugin left behind. Every
 * count is of this process only. */
#ifndef UNILINK_FAKEZE_H
#define UNILINK_FAKEZE_H

#ifdef __cplusplus
extern "C" {
#endif

/* zeMemAllocDevice/Host/Shared allocations not yet passed to zeMemFree. */
int fakeze_live_allocations(void);
/* zeMemOpenIpcHandle mappings not yet passed to zeMemCloseIpcHandle. */
int fakeze_open_ipc(void);
/* Newer-loader variant (ze-newer/libze_loader.so.1) only: IPC handles from
 * zeMemGetIpcHandle not yet returned with zeMemPutIpcHandle (each holds a descriptor);
 * always 0 in the 1.8.12 build, which has no zeMemPutIpcHandle. */
int fakeze_ipc_handles_out(void);
/* 1 in the newer-loader variant (zeMemPutIpcHandle and the descriptor conversions
 * exported), 0 in the default 1.8.12 build. */
int fakeze_newer_loader(void);
/* Command lists, event pools, events and contexts created and not destroyed. */
int fakeze_live_command_lists(void);
int fakeze_live_event_pools(void);
int fakeze_live_events(void);
int fakeze_live_contexts(void);
/* Commands thrown away by zeCommandListDestroy because they were still waiting on an
 * event (the application destroyed a list the device still referenced). */
int fakeze_dropped_commands(void);
/* Calls the specification forbids that the fake detected (appends to one command list
 * from two threads at once, an event created twice, zeMemFree of memory a queued or
 * running copy still touches, ...); each is also reported on stderr. */
int fakeze_spec_violations(void);
/* 1 when fake device @device (index as zeDeviceGet orders root devices, sub-devices
 * after all roots) is lost: a command of one of its lists touched memory it cannot
 * reach. Then every event that command list still owed reports
 * ZE_RESULT_ERROR_DEVICE_LOST, as does every later append on the device. */
int fakeze_device_lost(int device);

#if defined(FAKEZE_NEWER_LOADER) && defined(_ZE_API_H)
/* Entry points of newer loaders (declared by Level Zero 1.9+ headers, not by 1.8.12)
 * that the newer-loader variant exports; define FAKEZE_NEWER_LOADER to use them. */
ZE_APIEXPORT ze_result_t ZE_APICALL zeMemPutIpcHandle(ze_context_handle_t hContext,
                                                      ze_ipc_mem_handle_t handle);
ZE_APIEXPORT ze_result_t ZE_APICALL zeMemGetFileDescriptorFromIpcHandleExp(
    ze_context_handle_t hContext, ze_ipc_mem_handle_t ipcHandle, uint64_t *pHandle);
ZE_APIEXPORT ze_result_t ZE_APICALL zeMemGetIpcHandleFromFileDescriptorExp(
    ze_context_handle_t hContext, uint64_t handle, ze_ipc_mem_handle_t *pIpcHandle);
#endif

#ifdef __cplusplus
}
#endif
#endif

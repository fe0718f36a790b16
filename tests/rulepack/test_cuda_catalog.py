"""rules/cuda.yaml maps every CUDA error name: each cudaError_t name of the runtime (driver_types.h of CUDA 12:
cudaErrorInvalidValue = 1 ... cudaErrorUnknown = 999, cudaSuccess aside) and each CUresult name of the driver API
(cuda.h), gives exactly one CUDA event, of the kind its meaning says."""

from __future__ import annotations

import pytest

from attribution.pipeline.rulecheck import events_for_line

RUNTIME = """InvalidValue MemoryAllocation InitializationError CudartUnloading ProfilerDisabled ProfilerNotInitialized
ProfilerAlreadyStarted ProfilerAlreadyStopped InvalidConfiguration InvalidPitchValue InvalidSymbol InvalidHostPointer
InvalidDevicePointer InvalidTexture InvalidTextureBinding InvalidChannelDescriptor InvalidMemcpyDirection
AddressOfConstant TextureFetchFailed TextureNotBound SynchronizationError InvalidFilterSetting InvalidNormSetting
MixedDeviceExecution NotYetImplemented MemoryValueTooLarge StubLibrary InsufficientDriver CallRequiresNewerDriver
InvalidSurface DuplicateVariableName DuplicateTextureName DuplicateSurfaceName DevicesUnavailable
IncompatibleDriverContext MissingConfiguration PriorLaunchFailure LaunchMaxDepthExceeded LaunchFileScopedTex
LaunchFileScopedSurf SyncDepthExceeded LaunchPendingCountExceeded InvalidDeviceFunction NoDevice InvalidDevice
DeviceNotLicensed SoftwareValidityNotEstablished StartupFailure InvalidKernelImage DeviceUninitialized
MapBufferObjectFailed UnmapBufferObjectFailed ArrayIsMapped AlreadyMapped NoKernelImageForDevice AlreadyAcquired
NotMapped NotMappedAsArray NotMappedAsPointer ECCUncorrectable UnsupportedLimit DeviceAlreadyInUse
PeerAccessUnsupported InvalidPtx InvalidGraphicsContext NvlinkUncorrectable JitCompilerNotFound UnsupportedPtxVersion
JitCompilationDisabled UnsupportedExecAffinity UnsupportedDevSideSync Contained InvalidSource FileNotFound
SharedObjectSymbolNotFound SharedObjectInitFailed OperatingSystem InvalidResourceHandle IllegalState SymbolNotFound
NotReady IllegalAddress LaunchOutOfResources LaunchTimeout LaunchIncompatibleTexturing PeerAccessAlreadyEnabled
PeerAccessNotEnabled SetOnActiveProcess ContextIsDestroyed Assert TooManyPeers HostMemoryAlreadyRegistered
HostMemoryNotRegistered HardwareStackError IllegalInstruction MisalignedAddress InvalidAddressSpace InvalidPc
LaunchFailure CooperativeLaunchTooLarge NotPermitted NotSupported SystemNotReady SystemDriverMismatch
CompatNotSupportedOnDevice MpsConnectionFailed MpsRpcFailure MpsServerNotReady MpsMaxClientsReached
MpsMaxConnectionsReached MpsClientTerminated CdpNotSupported CdpVersionMismatch StreamCaptureUnsupported
StreamCaptureInvalidated StreamCaptureMerge StreamCaptureUnmatched StreamCaptureUnjoined StreamCaptureIsolation
StreamCaptureImplicit CapturedEvent StreamCaptureWrongThread Timeout GraphExecUpdateFailure ExternalDevice
InvalidClusterSize FunctionNotLoaded InvalidResourceType InvalidResourceConfiguration Unknown""".split()

DRIVER = """INVALID_VALUE OUT_OF_MEMORY NOT_INITIALIZED DEINITIALIZED PROFILER_DISABLED PROFILER_NOT_INITIALIZED
PROFILER_ALREADY_STARTED PROFILER_ALREADY_STOPPED STUB_LIBRARY DEVICE_UNAVAILABLE NO_DEVICE INVALID_DEVICE
DEVICE_NOT_LICENSED INVALID_IMAGE INVALID_CONTEXT CONTEXT_ALREADY_CURRENT MAP_FAILED UNMAP_FAILED ARRAY_IS_MAPPED
ALREADY_MAPPED NO_BINARY_FOR_GPU ALREADY_ACQUIRED NOT_MAPPED NOT_MAPPED_AS_ARRAY NOT_MAPPED_AS_POINTER
ECC_UNCORRECTABLE UNSUPPORTED_LIMIT CONTEXT_ALREADY_IN_USE PEER_ACCESS_UNSUPPORTED INVALID_PTX
INVALID_GRAPHICS_CONTEXT NVLINK_UNCORRECTABLE JIT_COMPILER_NOT_FOUND UNSUPPORTED_PTX_VERSION JIT_COMPILATION_DISABLED
UNSUPPORTED_EXEC_AFFINITY UNSUPPORTED_DEVSIDE_SYNC CONTAINED INVALID_SOURCE FILE_NOT_FOUND
SHARED_OBJECT_SYMBOL_NOT_FOUND SHARED_OBJECT_INIT_FAILED OPERATING_SYSTEM INVALID_HANDLE ILLEGAL_STATE NOT_FOUND
NOT_READY ILLEGAL_ADDRESS LAUNCH_OUT_OF_RESOURCES LAUNCH_TIMEOUT LAUNCH_INCOMPATIBLE_TEXTURING
PEER_ACCESS_ALREADY_ENABLED PEER_ACCESS_NOT_ENABLED PRIMARY_CONTEXT_ACTIVE CONTEXT_IS_DESTROYED ASSERT TOO_MANY_PEERS
HOST_MEMORY_ALREADY_REGISTERED HOST_MEMORY_NOT_REGISTERED HARDWARE_STACK_ERROR ILLEGAL_INSTRUCTION MISALIGNED_ADDRESS
INVALID_ADDRESS_SPACE INVALID_PC LAUNCH_FAILED COOPERATIVE_LAUNCH_TOO_LARGE NOT_PERMITTED NOT_SUPPORTED
SYSTEM_NOT_READY SYSTEM_DRIVER_MISMATCH COMPAT_NOT_SUPPORTED_ON_DEVICE MPS_CONNECTION_FAILED MPS_RPC_FAILURE
MPS_SERVER_NOT_READY MPS_MAX_CLIENTS_REACHED MPS_MAX_CONNECTIONS_REACHED MPS_CLIENT_TERMINATED CDP_NOT_SUPPORTED
CDP_VERSION_MISMATCH STREAM_CAPTURE_UNSUPPORTED STREAM_CAPTURE_INVALIDATED STREAM_CAPTURE_MERGE
STREAM_CAPTURE_UNMATCHED STREAM_CAPTURE_UNJOINED STREAM_CAPTURE_ISOLATION STREAM_CAPTURE_IMPLICIT CAPTURED_EVENT
STREAM_CAPTURE_WRONG_THREAD TIMEOUT GRAPH_EXEC_UPDATE_FAILURE EXTERNAL_DEVICE INVALID_CLUSTER_SIZE
FUNCTION_NOT_LOADED INVALID_RESOURCE_TYPE INVALID_RESOURCE_CONFIGURATION UNKNOWN""".split()

CUDA_KINDS = {"cuda_error", "cuda_ecc_error", "cuda_illegal_address", "cuda_oom", "cuda_device_assert",
              "config_error", "cuda_kernel_exception", "cuda_usage_error", "cuda_nvlink_error",
              "cuda_system_not_ready", "cuda_no_device"}

#: What a few names mean (docs/log-formats.md 4.5); every name gets one of CUDA_KINDS.
MEANING = {
    "cudaErrorECCUncorrectable": "cuda_ecc_error", "CUDA_ERROR_ECC_UNCORRECTABLE": "cuda_ecc_error",
    "cudaErrorIllegalAddress": "cuda_illegal_address", "CUDA_ERROR_MISALIGNED_ADDRESS": "cuda_illegal_address",
    "cudaErrorIllegalInstruction": "cuda_kernel_exception", "CUDA_ERROR_INVALID_PC": "cuda_kernel_exception",
    "cudaErrorHardwareStackError": "cuda_kernel_exception", "cudaErrorMemoryAllocation": "cuda_oom",
    "CUDA_ERROR_OUT_OF_MEMORY": "cuda_oom", "cudaErrorAssert": "cuda_device_assert",
    "cudaErrorNoDevice": "cuda_no_device", "CUDA_ERROR_NOT_INITIALIZED": "cuda_no_device",
    "cudaErrorDevicesUnavailable": "cuda_no_device", "cudaErrorInvalidDevice": "config_error",
    "cudaErrorInsufficientDriver": "config_error", "CUDA_ERROR_NO_BINARY_FOR_GPU": "config_error",
    "cudaErrorNvlinkUncorrectable": "cuda_nvlink_error", "cudaErrorSystemNotReady": "cuda_system_not_ready",
    "CUDA_ERROR_SYSTEM_NOT_READY": "cuda_system_not_ready", "cudaErrorLaunchOutOfResources": "cuda_usage_error",
    "cudaErrorStreamCaptureUnsupported": "cuda_usage_error", "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD": "cuda_usage_error",
    "cudaErrorLaunchFailure": "cuda_error", "CUDA_ERROR_LAUNCH_TIMEOUT": "cuda_error", "cudaErrorUnknown": "cuda_error",
    "CUDA_ERROR_CONTAINED": "cuda_error", "cudaErrorInvalidValue": "cuda_error",
}

NAMES = [f"cudaError{n}" for n in RUNTIME] + [f"CUDA_ERROR_{n}" for n in DRIVER]


@pytest.mark.parametrize("name", NAMES)
def test_every_cuda_error_name_gives_one_cuda_event(ruleset, name):
    evs = [e for e in events_for_line(ruleset, "job", f"RuntimeError: {name}: the CUDA call failed")
           if e.kind in CUDA_KINDS]
    assert len(evs) == 1, [(e.rule, e.kind) for e in evs]
    if name in MEANING:
        assert evs[0].kind == MEANING[name]


/**
 * @file gpuguard.hpp
 * @brief All header-only guards. Usable from .cu and .cpp files with no library to link
 *        (only the CUDA runtime).
 */
#pragma once

#include <gpuguard/config.hpp>
#include <gpuguard/cuda_memory_resources.hpp>
#include <gpuguard/current_resource.hpp>
#include <gpuguard/device.hpp>
#include <gpuguard/device_array.hpp>
#include <gpuguard/device_buffer.hpp>
#include <gpuguard/error.hpp>
#include <gpuguard/event.hpp>
#include <gpuguard/host_memory_resource.hpp>
#include <gpuguard/memory_resource.hpp>
#include <gpuguard/pinned_buffer.hpp>
#include <gpuguard/scope_exit.hpp>
#include <gpuguard/stream.hpp>

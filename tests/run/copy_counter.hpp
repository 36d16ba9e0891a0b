#pragma once
// Counts the copies libtorch makes between devices while alive: `Tensor::to` ends in
// aten::_to_copy. Shared by the run-time and the CUDA tests.
#include <atomic>
#include <memory>
#include <string_view>

#include <ATen/record_function.h>

struct CopyCounter {
  static inline std::atomic<int> count{0};
  at::CallbackHandle handle;
  CopyCounter() {
    count = 0;
    handle = at::addGlobalCallback(
        at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
          if (std::string_view(fn.name()) == "aten::_to_copy") ++count;
          return nullptr;
        }).needsInputs(false));
  }
  ~CopyCounter() { at::removeCallback(handle); }
};

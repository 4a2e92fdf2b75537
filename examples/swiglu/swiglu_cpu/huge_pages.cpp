// CPU outputs on transparent huge pages.
//
// A fresh CPU tensor of 32 MiB or more is a fresh mmap (glibc maps every
// allocation from its largest mmap threshold, 32 MiB, up, and unmaps it on
// free), so each use first page-faults every 4 KiB page. At LLM shapes that is
// most of a fused op's time: on the 2-core VM this was measured on, 32 MiB
// costs about 15 ms of page faults against about 4 ms for the op's own pass
// over memory. On 2 MiB pages the same 32 MiB faults in about 4 ms.
// (torch's own allocator does this for every tensor when
// THP_MEM_ALLOC_ENABLE=1 is set; this does it for the ops' outputs only.)
//
// Freed large blocks are kept for reuse (the newest kKeptBlocks, at most
// kKeptBytes in all), as torch's CUDA caching allocator keeps GPU memory: a block whose pages
// are already faulted in is handed out again at no cost, where a fresh mapping
// faults (and the kernel zeroes) every page first, which is then most of the
// op's time. A model's forward frees and allocates same-sized activations over
// and over, so the same few blocks serve it.
//
// Smaller outputs come from torch's CPU allocator, where glibc reuses freed
// heap memory without faulting it in again. MADV_HUGEPAGE is a hint: where
// transparent huge pages are off, the kernel maps 4 KiB pages as usual.
// SWIGLU_DISABLE_HUGE_PAGES=1 (read once per process) turns this off.

#include <ATen/EmptyTensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "torch-ext/torch_binding.h"

#if defined(__linux__)
#include <sys/mman.h>
#define SWIGLU_HAVE_MADVISE 1
#endif

namespace swiglu {
namespace cpu {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kMinBytes = size_t{32} << 20;
constexpr size_t kKeptBlocks = 4;
constexpr size_t kKeptBytes = size_t{1} << 30;

bool huge_pages_disabled() {
  const char* value = std::getenv("SWIGLU_DISABLE_HUGE_PAGES");
  if (value == nullptr) {
    return false;
  }
  const std::string v(value);
  return !(v.empty() || v == "0" || v == "false" || v == "off" || v == "no");
}

#if defined(SWIGLU_HAVE_MADVISE)
struct Mapping {
  void* base;
  size_t length;
  void* data;  // base, aligned up to a huge page
};

// Freed mappings kept for reuse. Never destroyed: a tensor may be freed after
// static destructors have run.
struct KeptMappings {
  std::mutex mutex;
  std::vector<Mapping*> blocks;
  size_t bytes = 0;
};

KeptMappings& kept() {
  static KeptMappings* mappings = new KeptMappings();
  return *mappings;
}

Mapping* reuse(size_t length) {
  KeptMappings& k = kept();
  std::lock_guard<std::mutex> lock(k.mutex);
  for (size_t i = 0; i < k.blocks.size(); ++i) {
    if (k.blocks[i]->length == length) {
      Mapping* mapping = k.blocks[i];
      k.blocks.erase(k.blocks.begin() + static_cast<std::ptrdiff_t>(i));
      k.bytes -= length;
      return mapping;
    }
  }
  return nullptr;
}

// Keeps a freed block, evicting the oldest kept ones when over the limits (the
// shapes a model uses now matter more than earlier ones).
void release(void* context) {
  Mapping* mapping = static_cast<Mapping*>(context);
  std::vector<Mapping*> evicted;
  {
    KeptMappings& k = kept();
    std::lock_guard<std::mutex> lock(k.mutex);
    if (mapping->length <= kKeptBytes) {
      k.blocks.push_back(mapping);
      k.bytes += mapping->length;
      mapping = nullptr;
      while (k.blocks.size() > kKeptBlocks || k.bytes > kKeptBytes) {
        evicted.push_back(k.blocks.front());
        k.bytes -= k.blocks.front()->length;
        k.blocks.erase(k.blocks.begin());
      }
    }
  }
  if (mapping != nullptr) {
    evicted.push_back(mapping);
  }
  for (Mapping* m : evicted) {  // outside the lock: munmap of a large block takes a while
    munmap(m->base, m->length);
    delete m;
  }
}

// Large blocks as their own mappings, 2 MiB aligned and advised as huge
// pages; everything else from torch's CPU allocator. An allocator (rather
// than a fixed buffer) keeps the storage resizable like any CPU tensor's.
class HugePageAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    if (n < kMinBytes) {
      return c10::GetCPUAllocator()->allocate(n);
    }
    const size_t rounded = (n + kHugePage - 1) / kHugePage * kHugePage;
    const size_t length = rounded + kHugePage;  // room to align the start
    Mapping* mapping = reuse(length);
    if (mapping == nullptr) {
      void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (base == MAP_FAILED) {
        return c10::GetCPUAllocator()->allocate(n);
      }
      const uintptr_t start = (reinterpret_cast<uintptr_t>(base) + kHugePage - 1) & ~(kHugePage - 1);
      mapping = new Mapping{base, length, reinterpret_cast<void*>(start)};
      madvise(mapping->data, rounded, MADV_HUGEPAGE);
    }
    return {mapping->data, mapping, &release, c10::Device(c10::DeviceType::CPU)};
  }

  void copy_data(void* dest, const void* src, size_t count) const override {
    std::memcpy(dest, src, count);
  }
};
#endif

}  // namespace

at::Tensor new_output(c10::IntArrayRef size, at::ScalarType dtype) {
#if defined(SWIGLU_HAVE_MADVISE)
  static const bool enabled = !huge_pages_disabled();
  static HugePageAllocator allocator;
  if (enabled) {
    return at::detail::empty_generic(size, &allocator, c10::DispatchKeySet(c10::DispatchKey::CPU),
                                     dtype, std::nullopt);
  }
#endif
  return at::detail::empty_cpu(size, dtype, /*pin_memory=*/false, std::nullopt);
}

}  // namespace cpu
}  // namespace swiglu

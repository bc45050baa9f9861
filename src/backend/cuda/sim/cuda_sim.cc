// CUDA emulator runtime (see cuda_sim.h): launch checks, the fiber scheduler
// behind __syncthreads and the warp shuffles, device memory, the host GEMMs.

// Fibers switch with _setjmp/_longjmp between stacks, which glibc's fortified
// longjmp would reject as "longjmp causes uninitialized stack frame".
#undef _FORTIFY_SOURCE
#include "backend/cuda/sim/cuda_sim.h"

#include <setjmp.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <unordered_map>
#include <vector>

#ifdef PT_SIM_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

// H100/H200 limits.
enum {
    MAX_THREADS_PER_BLOCK = 1024,
    MAX_BLOCK_Z = 64,
    MAX_GRID_YZ = 65535,
    DEFAULT_DYN_SMEM = 48 * 1024,
    MAX_DYN_SMEM_OPTIN = 227 * 1024,
    SMEM_CANARY = 64,  // bytes after the dynamic shared memory, checked after each block
};
static const unsigned char CANARY_BYTE = 0xa5, POISON_BYTE = 0xff;

namespace pt_sim {

uint3 g_thread_idx;
uint3 g_block_idx;
dim3 g_block_dim;
dim3 g_grid_dim;
static bool reverse_from_env(void) {
    const char *v = getenv("PT_CUDA_SIM_REVERSE");
    return v && *v && strcmp(v, "0") != 0;
}
bool g_reverse_order = reverse_from_env();

[[noreturn]] static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("cuda-sim: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

// ---- runtime state ----

static std::mutex g_state_mutex;  // allocations, streams, attributes, last error
static cudaError_t g_last_error = cudaSuccess;
static std::map<uintptr_t, size_t> g_allocs;  // device allocation start -> bytes
// Outside ASan (which bounds-checks exact-size allocations itself) every
// device allocation is followed by a canary, checked after every launch.
#ifdef PT_SIM_ASAN
enum { ALLOC_CANARY = 0 };
#else
enum { ALLOC_CANARY = 64 };
#endif
static std::set<const CUstream_st *> g_streams;
static std::unordered_map<const void *, int> g_max_dyn_smem;  // kernel -> attribute value

static cudaError_t record(cudaError_t err) {
    if (err != cudaSuccess) g_last_error = err;
    return err;
}

static cudaError_t record_locked(cudaError_t err) {
    std::lock_guard<std::mutex> lock(g_state_mutex);
    return record(err);
}

// [p, p + bytes) lies inside one device allocation (caller holds the lock).
static bool in_device_memory(const void *p, size_t bytes) {
    uintptr_t a = (uintptr_t)p;
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return false;
    --it;
    return a >= it->first && bytes <= it->second && a - it->first <= it->second - bytes;
}

static bool valid_stream(cudaStream_t s) { return s == nullptr || g_streams.count(s) != 0; }

// ---- launches ----

enum fiber_state { RUNNABLE, AT_BARRIER, AT_WARP, DONE };

// How fibers switch: x86-64 by a few instructions of its own (the callee-saved
// registers pushed on the fiber's stack, then the stack pointer exchanged);
// elsewhere (or with PT_SIM_SETJMP) _setjmp/_longjmp, after a makecontext
// start; PT_SIM_SWAPCONTEXT: swapcontext (a signal-mask syscall per switch),
// only to compare. Per switch (best of 7, a 256-thread warp-shuffle loop):
// about 2x faster than _setjmp/_longjmp, which is 10x faster than swapcontext.
// Built for CET shadow stacks (-fcf-protection=return/full), neither stack
// switch of our own is allowed to run: glibc's swapcontext knows them.
#if defined(__CET__) && (__CET__ & 2) && !defined(PT_SIM_SWAPCONTEXT)
#define PT_SIM_SWAPCONTEXT 1
#endif
#if defined(PT_SIM_SWAPCONTEXT)
#elif defined(__x86_64__) && !defined(PT_SIM_SETJMP)
#define PT_SIM_ASM_SWITCH 1
#else
#define PT_SIM_SETJMP_SWITCH 1
#endif

struct alignas(64) fiber {
    // hot: what a switch and a warp operation touch
    void *sp;  // PT_SIM_ASM_SWITCH: the saved stack pointer
    fiber_state state;
    unsigned int index;  // in g_fibers: the thread's linear index in the block
    uint3 tid;
    uint64_t shfl_result;
#ifdef PT_SIM_ASAN
    void *fake_stack;
#endif
    unsigned char *stack;
    size_t stack_bytes;
#ifndef PT_SIM_ASM_SWITCH
    bool started;
    jmp_buf ctx;
    ucontext_t start;  // makecontext's first entry (and swapcontext's saved context)
#endif
};

struct warp_slot {
    unsigned int arrived, done;
    warp_op op;
    int width;
    uint64_t values[32];
    int src[32];  // lane to read, -1: own value
};

struct launch_state {
    const char *name;
    bool sync;
    dim3 grid, block;
    unsigned int nthreads;
    size_t smem_bytes;
    unsigned char *smem;  // smem_bytes + SMEM_CANARY
    // fiber launches
    void (*body)(void *);
    void *body_ctx;
    unsigned int barrier_arrived, done;
    std::vector<warp_slot> warps;
};

static std::mutex g_launch_mutex;
static launch_state g_launch;
static thread_local bool t_in_launch;  // this host thread runs a launch (its fibers included)

bool begin_launch(const char *name, const void *kernel, dim3 grid, dim3 block, size_t smem_bytes,
                  cudaStream_t stream, bool sync) {
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0) {
        record_locked(cudaErrorInvalidConfiguration);  // as CUDA: nothing runs, an error code
        return false;
    }
    if (threads > MAX_THREADS_PER_BLOCK || block.x > MAX_THREADS_PER_BLOCK || block.y > MAX_THREADS_PER_BLOCK)
        die("kernel '%s': block (%u, %u, %u) has %llu threads, more than %d", name, block.x, block.y, block.z,
            threads, MAX_THREADS_PER_BLOCK);
    if (block.z > MAX_BLOCK_Z) die("kernel '%s': blockDim.z %u > %d", name, block.z, MAX_BLOCK_Z);
    if (grid.x > 0x7fffffffu || grid.y > MAX_GRID_YZ || grid.z > MAX_GRID_YZ)
        die("kernel '%s': grid (%u, %u, %u) exceeds (2^31-1, %d, %d)", name, grid.x, grid.y, grid.z, MAX_GRID_YZ,
            MAX_GRID_YZ);
    {
        std::lock_guard<std::mutex> lock(g_state_mutex);
        if (!valid_stream(stream)) {
            record(cudaErrorInvalidResourceHandle);
            return false;
        }
        if (smem_bytes > MAX_DYN_SMEM_OPTIN)
            die("kernel '%s': %zu bytes of dynamic shared memory, more than the device's %d", name, smem_bytes,
                MAX_DYN_SMEM_OPTIN);
        // The attribute's default is 48 KiB; a launch above it fails on a GPU.
        auto it = g_max_dyn_smem.find(kernel);
        int limit = it == g_max_dyn_smem.end() ? DEFAULT_DYN_SMEM : it->second;
        if (smem_bytes > (size_t)limit)
            die("kernel '%s': %zu bytes of dynamic shared memory need cudaFuncSetAttribute(%s, "
                "cudaFuncAttributeMaxDynamicSharedMemorySize, >= %zu) first (now %d)",
                name, smem_bytes, name, smem_bytes, limit);
    }
    if (t_in_launch) die("kernel '%s' launched from inside kernel '%s'", name, g_launch.name);
    g_launch_mutex.lock();  // waits for another host thread's launch
    t_in_launch = true;
    launch_state &L = g_launch;
    L.name = name;
    L.sync = sync;
    L.grid = grid;
    L.block = block;
    L.nthreads = (unsigned int)threads;
    L.smem_bytes = smem_bytes;
    L.smem = nullptr;
    if (smem_bytes) {
        L.smem = static_cast<unsigned char *>(::operator new(smem_bytes + SMEM_CANARY, std::align_val_t(16)));
        memset(L.smem + smem_bytes, CANARY_BYTE, SMEM_CANARY);
    }
    g_grid_dim = grid;
    g_block_dim = block;
    return true;
}

// The linker's bounds of the section holding every __shared__ array (absent
// without any, or under ASan).
extern "C" {
extern unsigned char __start_pt_sim_shared[] __attribute__((weak));
extern unsigned char __stop_pt_sim_shared[] __attribute__((weak));
}

void begin_block(unsigned int x, unsigned int y, unsigned int z) {
    g_block_idx = uint3{x, y, z};
    if (g_launch.smem) memset(g_launch.smem, POISON_BYTE, g_launch.smem_bytes);
    // Only where threads can share it; a per-block memset of every kernel's
    // arrays would slow PT_LAUNCH grids of many small blocks.
    uintptr_t start = (uintptr_t)__start_pt_sim_shared, stop = (uintptr_t)__stop_pt_sim_shared;
    if (g_launch.sync && start && stop > start) memset(__start_pt_sim_shared, POISON_BYTE, stop - start);
}

void end_block(void) {
    const launch_state &L = g_launch;
    if (!L.smem) return;
    for (int i = 0; i < SMEM_CANARY; i++)
        if (L.smem[L.smem_bytes + i] != CANARY_BYTE)
            die("kernel '%s', block (%u, %u, %u): a write past its %zu bytes of dynamic shared memory", L.name,
                g_block_idx.x, g_block_idx.y, g_block_idx.z, L.smem_bytes);
}

// Aborts if kernel `name` overwrote a device allocation's canary.
static void check_alloc_canaries(const char *name) {
    if (ALLOC_CANARY == 0) return;
    std::lock_guard<std::mutex> lock(g_state_mutex);
    for (const auto &a : g_allocs) {
        const unsigned char *c = (const unsigned char *)a.first + a.second;
        for (int i = 0; i < ALLOC_CANARY; i++)
            if (c[i] != CANARY_BYTE)
                die("kernel '%s' wrote past the end of the %zu-byte device buffer at %p", name, a.second,
                    (void *)a.first);
    }
}

void end_launch(void) {
    check_alloc_canaries(g_launch.name);
    if (g_launch.smem) ::operator delete(g_launch.smem, std::align_val_t(16));
    g_launch.smem = nullptr;
    t_in_launch = false;
    g_launch_mutex.unlock();
}

unsigned char *dyn_smem(void) {
    if (!t_in_launch) die("PT_DYN_SMEM used outside a kernel");
    if (!g_launch.smem)
        die("kernel '%s' uses PT_DYN_SMEM but was launched with 0 bytes of dynamic shared memory", g_launch.name);
    return g_launch.smem;
}

cudaError_t func_set_attribute(const void *kernel, cudaFuncAttribute attr, int value) {
    std::lock_guard<std::mutex> lock(g_state_mutex);
    if (!kernel) return record(cudaErrorInvalidDeviceFunction);
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return record(cudaErrorInvalidValue);
    if (value < 0 || value > MAX_DYN_SMEM_OPTIN) return record(cudaErrorInvalidValue);
    g_max_dyn_smem[kernel] = value;
    return cudaSuccess;
}

// ---- fibers ----
// Every thread of a PT_LAUNCH_SYNC block is a fiber with its own stack; the
// fibers are kept and reused by every block and launch. A fiber runs until it
// waits (barrier, warp operation) or exits, then passes control straight to
// the next runnable fiber (round-robin); when none is runnable control returns
// to the scheduler, which checks that every thread exited (else: deadlock).

#ifdef PT_SIM_ASAN
static const size_t FIBER_STACK = 256 * 1024;  // ASan frames are larger
#else
static const size_t FIBER_STACK = 64 * 1024;
#endif

// A plain array (not a vector destroyed at exit), so LeakSanitizer sees the
// kept fibers as reachable.
static fiber *g_fibers[MAX_THREADS_PER_BLOCK];
static unsigned int g_nfibers = 0;
static fiber *g_current = nullptr;  // nullptr: the scheduler (the launching thread's own stack)
#if defined(PT_SIM_ASM_SWITCH)
static void *g_sched_sp;
#elif defined(PT_SIM_SETJMP_SWITCH)
static jmp_buf g_sched_ctx;
#else
static ucontext_t g_sched_uc;
#endif
#ifdef PT_SIM_ASAN
static void *g_sched_fake_stack;
static const void *g_sched_stack_bottom;
static size_t g_sched_stack_bytes;
#endif
static unsigned long long g_switches = 0;

static void fiber_main(void);

#ifdef PT_SIM_ASM_SWITCH
// pt_sim_switch_stack(&save_sp, to_sp): pushes the callee-saved registers,
// saves the stack pointer, loads to_sp and pops the target's registers; its
// `ret` resumes the target (or enters a new fiber at fiber_main).
extern "C" void pt_sim_switch_stack(void **save_sp, void *to_sp);
asm(".text\n"
    ".p2align 4\n"
    ".type pt_sim_switch_stack, @function\n"
    "pt_sim_switch_stack:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size pt_sim_switch_stack, .-pt_sim_switch_stack\n");
#endif

static fiber *new_fiber(unsigned int index) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    // A PROT_NONE guard page below the stack: an overflow faults at once.
    void *mem = mmap(nullptr, FIBER_STACK + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) die("cannot map a %zu-byte fiber stack", FIBER_STACK);
    if (mprotect(mem, page, PROT_NONE) != 0) die("cannot protect a fiber stack's guard page");
    fiber *f = new fiber();
    f->index = index;
    f->stack = static_cast<unsigned char *>(mem) + page;
    f->stack_bytes = FIBER_STACK;
    // Stack tops staggered by 128 bytes per lane: otherwise every fiber's hot
    // frames share the same page offset, and so the same few L1 cache sets.
    size_t usable = f->stack_bytes - (index % 32) * 128;
#ifdef PT_SIM_ASM_SWITCH
    // The frame pt_sim_switch_stack pops: six registers, then the return
    // address fiber_main, entered with rsp = top - 8 as after a call.
    void **top = reinterpret_cast<void **>(f->stack + usable);
    top[-1] = nullptr;
    top[-2] = reinterpret_cast<void *>(&fiber_main);
    for (int r = 3; r <= 8; r++) top[-r] = nullptr;
    f->sp = top - 8;
#else
    if (getcontext(&f->start) != 0) die("getcontext failed");
    f->start.uc_stack.ss_sp = f->stack;
    f->start.uc_stack.ss_size = usable;
    f->start.uc_link = nullptr;  // fiber_main never returns
    makecontext(&f->start, fiber_main, 0);
#endif
    return f;
}

// Called on arrival in `self` (nullptr: the scheduler) after a switch.
static void arrived(fiber *self, bool from_scheduler) {
#ifdef PT_SIM_ASAN
    const void *bottom;
    size_t bytes;
    __sanitizer_finish_switch_fiber(self ? self->fake_stack : g_sched_fake_stack, &bottom, &bytes);
    if (from_scheduler) {
        g_sched_stack_bottom = bottom;
        g_sched_stack_bytes = bytes;
    }
#else
    (void)from_scheduler;
#endif
    g_current = self;
    if (self) g_thread_idx = self->tid;
}

static bool g_from_scheduler;

// The last step on `from`'s stack (nullptr: the scheduler) before control passes to `to`; arrived()
// is its counterpart on the other side.
static inline void leaving(fiber *from, fiber *to) {
#ifdef PT_SIM_ASAN
    __sanitizer_start_switch_fiber(from ? &from->fake_stack : &g_sched_fake_stack,
                                   to ? (const void *)to->stack : g_sched_stack_bottom,
                                   to ? to->stack_bytes : g_sched_stack_bytes);
#endif
    g_from_scheduler = from == nullptr;
    g_current = to;
}

static void switch_to(fiber *from, fiber *to) {
    g_switches++;
#if defined(PT_SIM_ASM_SWITCH)
    leaving(from, to);
    pt_sim_switch_stack(from ? &from->sp : &g_sched_sp, to ? to->sp : g_sched_sp);
#elif defined(PT_SIM_SWAPCONTEXT)
    leaving(from, to);
    if (to) to->started = true;
    if (swapcontext(from ? &from->start : &g_sched_uc, to ? &to->start : &g_sched_uc) != 0)
        die("swapcontext failed");
#else
    if (_setjmp(from ? from->ctx : g_sched_ctx) == 0) {
        leaving(from, to);
        if (!to) _longjmp(g_sched_ctx, 1);
        if (!to->started) {
            to->started = true;
            setcontext(&to->start);
            die("setcontext failed");
        }
        _longjmp(to->ctx, 1);
    }
#endif
    arrived(from, g_from_scheduler);
}

// The runnable fibers in the order they run: a ring of fiber indices (a fiber
// is in it at most once). Threads released by a barrier join at the tail in
// index order (reversed under g_reverse_order); lanes released by a warp
// operation at the head, so a warp runs on through its shuffles while its 32
// stacks are still in the L1 cache (about 2x faster than a round of all).
static unsigned short g_ready[MAX_THREADS_PER_BLOCK];
static unsigned int g_ready_head = 0, g_ready_count = 0;

static void make_ready(fiber *f) {
    f->state = RUNNABLE;
    g_ready[(g_ready_head + g_ready_count++) % MAX_THREADS_PER_BLOCK] = (unsigned short)f->index;
}

static void make_ready_first(fiber *f) {
    f->state = RUNNABLE;
    g_ready_head = (g_ready_head + MAX_THREADS_PER_BLOCK - 1) % MAX_THREADS_PER_BLOCK;
    g_ready[g_ready_head] = (unsigned short)f->index;
    g_ready_count++;
}

// Waits (the caller set its state) or exits: on to the next runnable fiber,
// or back to the scheduler when there is none.
static void block_wait(fiber *self) {
    fiber *next = nullptr;
    if (g_ready_count) {
        next = g_fibers[g_ready[g_ready_head]];
        g_ready_head = (g_ready_head + 1) % MAX_THREADS_PER_BLOCK;
        g_ready_count--;
    }
    switch_to(self, next);
}

static void thread_exited(fiber *self) {
    launch_state &L = g_launch;
    unsigned int i = self->index;
    self->state = DONE;
    L.done++;
    if (L.barrier_arrived)
        die("kernel '%s': __syncthreads not reached by every thread (thread (%u, %u, %u) of block (%u, %u, %u) "
            "exited while %u wait there)",
            L.name, self->tid.x, self->tid.y, self->tid.z, g_block_idx.x, g_block_idx.y, g_block_idx.z,
            L.barrier_arrived);
    warp_slot &w = L.warps[i / 32];
    w.done++;
    if (w.arrived)
        die("kernel '%s': a warp operation not reached by every lane (lane %u of warp %u in block (%u, %u, %u) "
            "exited while %u lanes wait)",
            L.name, i % 32, i / 32, g_block_idx.x, g_block_idx.y, g_block_idx.z, w.arrived);
}

static void fiber_main(void) {
    fiber *self = g_current;
    arrived(self, g_from_scheduler);
    for (;;) {
        g_launch.body(g_launch.body_ctx);
        thread_exited(self);
        block_wait(self);  // resumed by the next block (or launch) that uses this fiber
    }
}

void run_fibers(void (*thread_body)(void *), void *ctx) {
    launch_state &L = g_launch;
    L.body = thread_body;
    L.body_ctx = ctx;
    while (g_nfibers < L.nthreads) {
        g_fibers[g_nfibers] = new_fiber(g_nfibers);
        g_nfibers++;
    }
    L.warps.assign((L.nthreads + 31) / 32, warp_slot());
    unsigned int i = 0;
    for (unsigned int tz = 0; tz < L.block.z; tz++)
        for (unsigned int ty = 0; ty < L.block.y; ty++)
            for (unsigned int tx = 0; tx < L.block.x; tx++, i++) g_fibers[i]->tid = uint3{tx, ty, tz};
    const unsigned long long nblocks = (unsigned long long)L.grid.x * L.grid.y * L.grid.z;
    for (unsigned long long b = 0; b < nblocks; b++) {
        unsigned long long lin = g_reverse_order ? nblocks - 1 - b : b;  // x fastest, then y, z
        unsigned int bx = (unsigned int)(lin % L.grid.x), by = (unsigned int)(lin / L.grid.x % L.grid.y),
                     bz = (unsigned int)(lin / ((unsigned long long)L.grid.x * L.grid.y));
        begin_block(bx, by, bz);
        L.barrier_arrived = 0;
        L.done = 0;
        for (warp_slot &w : L.warps) w.arrived = w.done = 0;
        g_ready_head = g_ready_count = 0;
        for (unsigned int t = 0; t < L.nthreads; t++) make_ready(g_fibers[g_reverse_order ? L.nthreads - 1 - t : t]);
        block_wait(nullptr);
        if (L.done != L.nthreads) {
            unsigned int at_barrier = 0, at_warp = 0;
            for (unsigned int t = 0; t < L.nthreads; t++) {
                at_barrier += g_fibers[t]->state == AT_BARRIER;
                at_warp += g_fibers[t]->state == AT_WARP;
            }
            die("kernel '%s', block (%u, %u, %u): deadlock: %u threads wait at __syncthreads, %u at warp "
                "operations, %u exited",
                L.name, bx, by, bz, at_barrier, at_warp, L.done);
        }
        end_block();
    }
}

static fiber *require_fiber(const char *what) {
    if (!t_in_launch) die("%s called outside a kernel", what);
    if (!g_launch.sync)
        die("kernel '%s' synchronises: launch it with PT_LAUNCH_SYNC (it called %s)", g_launch.name, what);
    return g_current;
}

uint64_t warp_exchange(warp_op op, unsigned int mask, uint64_t value, int arg, int width) {
    static const char *const names[] = {"__syncwarp", "__shfl_sync", "__shfl_xor_sync", "__shfl_down_sync"};
    fiber *self = require_fiber(names[op]);
    launch_state &L = g_launch;
    if (mask != 0xffffffffu)
        die("kernel '%s': %s with mask 0x%08x: the emulator supports full-warp masks only", L.name, names[op], mask);
    if (width < 1 || width > 32 || (width & (width - 1)))
        die("kernel '%s': %s width %d is not a power of two <= 32", L.name, names[op], width);
    unsigned int i = self->index, lane = i % 32, warp = i / 32;
    unsigned int lanes = L.nthreads - warp * 32 < 32 ? L.nthreads - warp * 32 : 32;
    warp_slot &w = L.warps[warp];
    if (w.done)
        die("kernel '%s': %s not reached by every lane (warp %u of block (%u, %u, %u): %u lanes exited)", L.name,
            names[op], warp, g_block_idx.x, g_block_idx.y, g_block_idx.z, w.done);
    if (w.arrived == 0) {
        w.op = op;
        w.width = width;
    } else if (w.op != op || w.width != width) {
        die("kernel '%s': lanes of warp %u in block (%u, %u, %u) meet at different warp operations (%s width %d, "
            "%s width %d)",
            L.name, warp, g_block_idx.x, g_block_idx.y, g_block_idx.z, names[w.op], w.width, names[op], width);
    }
    // The source lane, as the PTX shfl modes define it within width-lane segments.
    int seg = (int)lane & ~(width - 1), src = -1;
    switch (op) {
    case WARP_SYNC: break;
    case WARP_SHFL: src = seg + (arg & (width - 1)); break;
    case WARP_SHFL_XOR: {
        int j = (int)lane ^ arg;
        src = j > seg + width - 1 || j < 0 ? -1 : j;  // later segments (or outside the warp): own value
        break;
    }
    case WARP_SHFL_DOWN: {
        int j = (int)lane + arg;
        src = arg < 0 || j > seg + width - 1 ? -1 : j;
        break;
    }
    }
    w.values[lane] = value;
    w.src[lane] = src;
    self->state = AT_WARP;
    if (++w.arrived == lanes) {
        for (unsigned int k = 0; k < lanes; k++) {  // pushed to the front last to first
            unsigned int l = g_reverse_order ? k : lanes - 1 - k;
            fiber *f = g_fibers[warp * 32 + l];
            int s = w.src[l];
            f->shfl_result = s < 0 ? w.values[l] : (unsigned int)s < lanes ? w.values[s] : ~(uint64_t)0;
            if (f != self) make_ready_first(f);
        }
        self->state = RUNNABLE;
        w.arrived = 0;
        return self->shfl_result;
    }
    block_wait(self);
    return self->shfl_result;
}

}  // namespace pt_sim

using namespace pt_sim;

void __syncthreads(void) {
    fiber *self = require_fiber("__syncthreads");
    launch_state &L = g_launch;
    if (L.done)
        die("kernel '%s': __syncthreads not reached by every thread (block (%u, %u, %u): %u threads exited before "
            "it)",
            L.name, g_block_idx.x, g_block_idx.y, g_block_idx.z, L.done);
    self->state = AT_BARRIER;
    if (++L.barrier_arrived == L.nthreads) {
        for (unsigned int k = 0; k < L.nthreads; k++) {
            fiber *f = g_fibers[g_reverse_order ? L.nthreads - 1 - k : k];
            if (f != self) make_ready(f);
        }
        self->state = RUNNABLE;
        L.barrier_arrived = 0;
        return;
    }
    block_wait(self);
}

unsigned long long pt_sim_context_switches(void) { return g_switches; }

void pt_sim_set_reverse_order(bool reverse) {
    std::lock_guard<std::mutex> lock(g_launch_mutex);  // not in the middle of a launch
    g_reverse_order = reverse;
}

// ---- runtime API ----

cudaError_t cudaMalloc(void **ptr, size_t bytes) {
    if (!ptr) return record_locked(cudaErrorInvalidValue);
    *ptr = nullptr;
    if (bytes == 0) return cudaSuccess;
    void *p = nullptr;
    if (bytes > SIZE_MAX - ALLOC_CANARY || posix_memalign(&p, 256, bytes + ALLOC_CANARY) != 0)
        return record_locked(cudaErrorMemoryAllocation);
    memset(p, POISON_BYTE, bytes);  // device memory starts undefined: make reads of it visible (NaN)
    memset(static_cast<unsigned char *>(p) + bytes, CANARY_BYTE, ALLOC_CANARY);
    std::lock_guard<std::mutex> lock(g_state_mutex);
    g_allocs[(uintptr_t)p] = bytes;
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void *ptr) {
    if (!ptr) return cudaSuccess;
    std::lock_guard<std::mutex> lock(g_state_mutex);
    auto it = g_allocs.find((uintptr_t)ptr);
    if (it == g_allocs.end()) return record(cudaErrorInvalidValue);
    for (int i = 0; i < ALLOC_CANARY; i++)
        if (static_cast<unsigned char *>(ptr)[it->second + i] != CANARY_BYTE)
            die("a kernel wrote past the end of the %zu-byte device buffer at %p (found at cudaFree)", it->second,
                ptr);
    g_allocs.erase(it);
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
    std::unique_lock<std::mutex> lock(g_state_mutex);
    if (!valid_stream(stream)) return record(cudaErrorInvalidResourceHandle);
    bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return record(cudaErrorInvalidMemcpyDirection);
    if (bytes == 0) return cudaSuccess;
    if (!dst || !src) return record(cudaErrorInvalidValue);
    // A GPU cannot tell a host pointer passed as a device one in time; here it is an error.
    if ((dst_dev && !in_device_memory(dst, bytes)) || (src_dev && !in_device_memory(src, bytes)))
        return record(cudaErrorInvalidValue);
    lock.unlock();
    memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream) {
    std::unique_lock<std::mutex> lock(g_state_mutex);
    if (!valid_stream(stream)) return record(cudaErrorInvalidResourceHandle);
    if (bytes == 0) return cudaSuccess;
    if (!in_device_memory(ptr, bytes)) return record(cudaErrorInvalidValue);
    lock.unlock();
    memset(ptr, value, bytes);
    return cudaSuccess;
}

struct CUstream_st {
    int unused;
};

cudaError_t cudaStreamCreate(cudaStream_t *stream) {
    if (!stream) return record_locked(cudaErrorInvalidValue);
    *stream = new CUstream_st();
    std::lock_guard<std::mutex> lock(g_state_mutex);
    g_streams.insert(*stream);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(g_state_mutex);
    if (!stream || !g_streams.erase(stream)) return record(cudaErrorInvalidResourceHandle);
    delete stream;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(g_state_mutex);
    return valid_stream(stream) ? cudaSuccess : record(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaGetDeviceCount(int *count) {
    if (!count) return record_locked(cudaErrorInvalidValue);
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : record_locked(cudaErrorInvalidDevice); }

cudaError_t cudaGetDevice(int *device) {
    if (!device) return record_locked(cudaErrorInvalidValue);
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
    if (!prop) return record_locked(cudaErrorInvalidValue);
    if (device != 0) return record_locked(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "portatrain CUDA emulator (host CPU)");
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    prop->totalGlobalMem = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
    prop->sharedMemPerBlock = DEFAULT_DYN_SMEM;
    prop->sharedMemPerBlockOptin = MAX_DYN_SMEM_OPTIN;
    prop->warpSize = warpSize;
    prop->maxThreadsPerBlock = MAX_THREADS_PER_BLOCK;
    prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = MAX_THREADS_PER_BLOCK;
    prop->maxThreadsDim[2] = MAX_BLOCK_Z;
    prop->maxGridSize[0] = 0x7fffffff;
    prop->maxGridSize[1] = prop->maxGridSize[2] = MAX_GRID_YZ;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 132;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    std::lock_guard<std::mutex> lock(g_state_mutex);
    cudaError_t err = g_last_error;
    g_last_error = cudaSuccess;
    return err;
}

cudaError_t cudaPeekAtLastError(void) {
    std::lock_guard<std::mutex> lock(g_state_mutex);
    return g_last_error;
}

const char *cudaGetErrorName(cudaError_t error) {
    switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorUnknown: return "cudaErrorUnknown";
    }
    return "unrecognized error code";
}

const char *cudaGetErrorString(cudaError_t error) {
    switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorUnknown: return "unknown error";
    }
    return "unrecognized error code";
}

// ---- host GEMMs ----
// op(A) is packed into panels of GEMM_MR rows (panel[p][i]), op(B) into panels
// of GEMM_NR columns (panel[p][j]), both zero-padded; a micro-kernel keeps a
// GEMM_MR x GEMM_NR block of C in registers over all of k, so every element is
// a single ascending sum. Tiles of panels are spread over OpenMP threads.

enum { GEMM_MR = 8, GEMM_NR = 4, GEMM_TILE_M = 64, GEMM_TILE_N = 64 };

static inline float round_tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) != 0x7f800000u) {  // finite: round to nearest even at bit 13
        u += 0x0fffu + ((u >> 13) & 1u);
        u &= ~0x1fffu;
    }
    memcpy(&x, &u, sizeof x);
    return x;
}

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

struct gemm_operand {
    const void *data;
    bool bf16, tf32;
    float load(long long idx) const {
        float x = bf16 ? bf16_to_f32(static_cast<const uint16_t *>(data)[idx]) : static_cast<const float *>(data)[idx];
        return tf32 ? round_tf32(x) : x;
    }
};

// op(X)(r, c) of a column-major X: X[r + c*ld], or X[c + r*ld] transposed.
// Packs rows x depth of op(X) in panels of `width` rows: out[panel][p][r].
static void pack_panels(float *out, const gemm_operand &x, bool trans, int ld, int rows, int depth, int width,
                        bool rows_are_op_rows) {
    int panels = (rows + width - 1) / width;
    for (int pn = 0; pn < panels; pn++) {
        float *dst = out + (size_t)pn * depth * width;
        for (int p = 0; p < depth; p++)
            for (int r = 0; r < width; r++) {
                int row = pn * width + r;
                float v = 0.0f;
                if (row < rows) {
                    // A: element (row, p) of op(A); B: element (p, row) of op(B).
                    long long i = rows_are_op_rows ? row : p, c = rows_are_op_rows ? p : row;
                    v = x.load(trans ? c + i * (long long)ld : i + c * (long long)ld);
                }
                dst[(size_t)p * width + r] = v;
            }
    }
}

static inline void gemm_micro(int k, const float *__restrict a, const float *__restrict b,
                              float out[GEMM_NR][GEMM_MR]) {
    float acc[GEMM_NR][GEMM_MR] = {};
    for (int p = 0; p < k; p++) {
        const float *ap = a + (size_t)p * GEMM_MR, *bp = b + (size_t)p * GEMM_NR;
        for (int j = 0; j < GEMM_NR; j++)
            for (int i = 0; i < GEMM_MR; i++) acc[j][i] += ap[i] * bp[j];
    }
    memcpy(out, acc, sizeof acc);
}

// The same block summed the way a GPU GEMM may sum it instead: k cut into
// four contiguous quarters (split-K), each a chain of fused multiply-adds,
// the partials added pairwise. Under PT_CUDA_SIM_GEMM=splitk the backend's
// tolerance tests then see a summation order other than cpu-ref's, as they
// will under cuBLAS, rather than cpu-ref's own order bit for bit.
static inline void gemm_micro_splitk(int k, const float *__restrict a, const float *__restrict b,
                                     float out[GEMM_NR][GEMM_MR]) {
    float part[4][GEMM_NR][GEMM_MR] = {};
    const int q = (k + 3) / 4;
    for (int s = 0; s < 4; s++) {
        const int k0 = s * q < k ? s * q : k, k1 = (s + 1) * q < k ? (s + 1) * q : k;
        for (int p = k0; p < k1; p++) {
            const float *ap = a + (size_t)p * GEMM_MR, *bp = b + (size_t)p * GEMM_NR;
            for (int j = 0; j < GEMM_NR; j++)
                for (int i = 0; i < GEMM_MR; i++) part[s][j][i] = std::fma(ap[i], bp[j], part[s][j][i]);
        }
    }
    for (int j = 0; j < GEMM_NR; j++)
        for (int i = 0; i < GEMM_MR; i++)
            out[j][i] = (part[0][j][i] + part[1][j][i]) + (part[2][j][i] + part[3][j][i]);
}

static bool splitk_from_env(void) {
    const char *e = getenv("PT_CUDA_SIM_GEMM");
    if (!e || !*e || !strcmp(e, "ascending")) return false;
    if (!strcmp(e, "splitk")) return true;
    die("PT_CUDA_SIM_GEMM=%s: expected 'ascending' or 'splitk'", e);
}
static bool g_gemm_splitk = splitk_from_env();
void pt_sim_set_gemm_splitk(bool splitk) { g_gemm_splitk = splitk; }

static void check_gemm(const char *fn, bool transa, bool transb, int m, int n, int k, int lda, int ldb, int ldc,
                       const void *A, const void *B, const void *C) {
    if (m < 0 || n < 0 || k < 0) die("%s: negative size m=%d n=%d k=%d", fn, m, n, k);
    int a_rows = transa ? k : m, b_rows = transb ? n : k;
    if (lda < (a_rows > 1 ? a_rows : 1)) die("%s: lda %d < %d, the rows of A", fn, lda, a_rows);
    if (ldb < (b_rows > 1 ? b_rows : 1)) die("%s: ldb %d < %d, the rows of B", fn, ldb, b_rows);
    if (ldc < (m > 1 ? m : 1)) die("%s: ldc %d < %d, the rows of C", fn, ldc, m);
    if (m && n && (!C || (k && (!A || !B)))) die("%s: a null matrix pointer", fn);
}

static void gemm(bool transa, bool transb, int m, int n, int k, float alpha, const gemm_operand &A, int lda,
                 const gemm_operand &B, int ldb, float beta, float *C, int ldc) {
    if (m == 0 || n == 0) return;
    if (k == 0 || alpha == 0.0f) {  // as BLAS: C = beta * C, A and B not read
        if (beta == 1.0f) return;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                float &c = C[i + (size_t)j * ldc];
                c = beta == 0.0f ? 0.0f : beta * c;
            }
        return;
    }
    static thread_local std::vector<float> apack, bpack;
    int mpanels = (m + GEMM_MR - 1) / GEMM_MR, npanels = (n + GEMM_NR - 1) / GEMM_NR;
    apack.resize((size_t)mpanels * GEMM_MR * k);
    bpack.resize((size_t)npanels * GEMM_NR * k);
    pack_panels(apack.data(), A, transa, lda, m, k, GEMM_MR, true);
    pack_panels(bpack.data(), B, transb, ldb, n, k, GEMM_NR, false);
    const float *ap = apack.data(), *bp = bpack.data();
    const int tile_mp = GEMM_TILE_M / GEMM_MR, tile_np = GEMM_TILE_N / GEMM_NR;
    const int tiles_m = (mpanels + tile_mp - 1) / tile_mp, tiles_n = (npanels + tile_np - 1) / tile_np;
    const long long tiles = (long long)tiles_m * tiles_n;
#pragma omp parallel for schedule(static) if (tiles > 1 && (double)m * n * k > 1e6)
    for (long long t = 0; t < tiles; t++) {
        int tm = (int)(t % tiles_m), tn = (int)(t / tiles_m);
        for (int jp = tn * tile_np; jp < npanels && jp < (tn + 1) * tile_np; jp++)
            for (int ip = tm * tile_mp; ip < mpanels && ip < (tm + 1) * tile_mp; ip++) {
                float acc[GEMM_NR][GEMM_MR];
                (g_gemm_splitk ? gemm_micro_splitk : gemm_micro)(k, ap + (size_t)ip * GEMM_MR * k,
                                                                 bp + (size_t)jp * GEMM_NR * k, acc);
                for (int j = 0; j < GEMM_NR && jp * GEMM_NR + j < n; j++) {
                    float *c = C + (size_t)(jp * GEMM_NR + j) * ldc + ip * GEMM_MR;
                    int rows = m - ip * GEMM_MR < GEMM_MR ? m - ip * GEMM_MR : GEMM_MR;
                    for (int i = 0; i < rows; i++)
                        c[i] = beta == 0.0f ? alpha * acc[j][i] : alpha * acc[j][i] + beta * c[i];
                }
            }
    }
}

void pt_sim_gemm_f32(bool transa, bool transb, int m, int n, int k, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc, bool tf32) {
    check_gemm("pt_sim_gemm_f32", transa, transb, m, n, k, lda, ldb, ldc, A, B, C);
    gemm(transa, transb, m, n, k, alpha, gemm_operand{A, false, tf32}, lda, gemm_operand{B, false, tf32}, ldb, beta,
         C, ldc);
}

void pt_sim_gemm_bf16(bool transa, bool transb, int m, int n, int k, float alpha, const uint16_t *A, int lda,
                      const uint16_t *B, int ldb, float beta, float *C, int ldc) {
    check_gemm("pt_sim_gemm_bf16", transa, transb, m, n, k, lda, ldb, ldc, A, B, C);
    gemm(transa, transb, m, n, k, alpha, gemm_operand{A, true, false}, lda, gemm_operand{B, true, false}, ldb, beta,
         C, ldc);
}

void pt_sim_gemm_strided_batched_f32(bool transa, bool transb, int m, int n, int k, float alpha, const float *A,
                                     int lda, const float *B, int ldb, float beta, float *C, int ldc, bool tf32,
                                     long long strideA, long long strideB, long long strideC, int batch) {
    check_gemm("pt_sim_gemm_strided_batched_f32", transa, transb, m, n, k, lda, ldb, ldc, A, B, C);
    if (batch < 0) die("pt_sim_gemm_strided_batched_f32: negative batch %d", batch);
    for (int b = 0; b < batch; b++)
        gemm(transa, transb, m, n, k, alpha, gemm_operand{A + b * strideA, false, tf32}, lda,
             gemm_operand{B + b * strideB, false, tf32}, ldb, beta, C + b * strideC, ldc);
}

/*
 * Real frame-pointer stacks for tests/unwind_real_frames.rs.
 *
 * main -> fgt_a -> fgt_b -> fgt_c -> fgt_d_{leaf,nonleaf}. The innermost
 * function captures pc/fp/sp (and ra/lr) with inline asm, the way the
 * sampler reads them from a ucontext, and copies the live stack [sp, top of
 * [stack]) into a buffer before anything below it can change. main then
 * prints everything as a line-oriented dump the Rust test parses:
 *
 *   arch <name>            word <bytes>
 *   pc|fp|sp <hex>         lr <hex>|none
 *   stack <lo> <hi>        the [stack] mapping from /proc/self/maps
 *   text <lo> <hi>         [__executable_start, etext)
 *   func <name> <hex>      runtime address (sizes come from nm -S)
 *   mem <hex addr> <hex bytes>
 *
 * Build: -O1 -fno-omit-frame-pointer -fno-inline -fno-optimize-sibling-calls
 * (plus -mno-omit-leaf-frame-pointer where gcc has it), -static.
 * Run: prog leaf|nonleaf
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

struct regs {
	uintptr_t pc, fp, sp, lr;
};

static struct regs regs;
static uintptr_t stack_lo, stack_hi;
static unsigned char stack_copy[1 << 20];
static uintptr_t copy_len;
static int copy_overflow;
static int leaf_mode;
volatile uintptr_t sink_word;

extern char __executable_start[];
extern char etext[];

/* Read the registers a signal handler would find in the ucontext. */
#if defined(__x86_64__)
#define ARCH_NAME "x86_64"
#define HAS_LR 0
#define CAPTURE()                                                              \
	__asm__ volatile("lea 0(%%rip), %0\n\tmov %%rbp, %1\n\tmov %%rsp, %2"  \
			 : "=r"(regs.pc), "=r"(regs.fp), "=r"(regs.sp))
#elif defined(__i386__)
#define ARCH_NAME "x86"
#define HAS_LR 0
#define CAPTURE()                                                              \
	__asm__ volatile("call 1f\n1:\tpop %0\n\tmov %%ebp, %1\n\tmov %%esp, %2" \
			 : "=r"(regs.pc), "=r"(regs.fp), "=r"(regs.sp))
#elif defined(__riscv) && __riscv_xlen == 64
#define ARCH_NAME "riscv64"
#define HAS_LR 1
#define CAPTURE()                                                              \
	__asm__ volatile("auipc %0, 0\n\tmv %1, s0\n\tmv %2, sp\n\tmv %3, ra"  \
			 : "=r"(regs.pc), "=r"(regs.fp), "=r"(regs.sp),        \
			   "=r"(regs.lr))
#elif defined(__aarch64__)
#define ARCH_NAME "aarch64"
#define HAS_LR 1
#define CAPTURE()                                                              \
	__asm__ volatile("adr %0, .\n\tmov %1, x29\n\tmov %2, sp\n\tmov %3, x30" \
			 : "=r"(regs.pc), "=r"(regs.fp), "=r"(regs.sp),        \
			   "=r"(regs.lr))
#else
#error "unsupported architecture"
#endif

/*
 * Copy [sp, stack_hi) with volatile byte reads: no call (so a leaf stays a
 * leaf) and no memcpy pattern for gcc to substitute.
 */
#define SNAPSHOT()                                                             \
	do {                                                                   \
		const volatile unsigned char *src_ =                           \
			(const volatile unsigned char *)regs.sp;               \
		uintptr_t n_ = stack_hi - regs.sp;                             \
		if (regs.sp < stack_lo || regs.sp >= stack_hi ||               \
		    n_ > sizeof stack_copy) {                                  \
			copy_overflow = 1;                                     \
			n_ = 0;                                                \
		}                                                              \
		for (uintptr_t i_ = 0; i_ < n_; i_++)                          \
			stack_copy[i_] = src_[i_];                             \
		copy_len = n_;                                                 \
	} while (0)

/*
 * Never called: its address is planted in the innermost frame as bait. A
 * walker that scanned the stack for text addresses instead of following the
 * frame-pointer chain would report it.
 */
NOINLINE void fgt_decoy(void)
{
	sink_word += 3;
	sink_word ^= 5;
}

NOINLINE void fgt_sink(void)
{
	sink_word++;
}

/* A leaf with a stack frame: it calls nothing, but the bait array forces a
 * frame on every architecture (on RISC-V gcc then saves only s0). */
NOINLINE int fgt_d_leaf(int x)
{
	volatile uintptr_t bait[4];

	CAPTURE();
	for (int i = 0; i < 4; i++)
		bait[i] = (uintptr_t)&fgt_decoy + (uintptr_t)i;
	SNAPSHOT();
	return x + (int)(bait[0] & 1);
}

/* Calls fgt_sink after the capture, so the prologue saves ra/lr: the usual
 * sampled state of a non-leaf function. */
NOINLINE int fgt_d_nonleaf(int x)
{
	volatile uintptr_t bait[4];

	CAPTURE();
	for (int i = 0; i < 4; i++)
		bait[i] = (uintptr_t)&fgt_decoy + (uintptr_t)i;
	SNAPSHOT();
	fgt_sink();
	return x + (int)(bait[0] & 1);
}

NOINLINE int fgt_c(int x)
{
	int r = leaf_mode ? fgt_d_leaf(x + 1) : fgt_d_nonleaf(x + 1);
	return r * 3;
}

NOINLINE int fgt_b(int x)
{
	return fgt_c(x + 2) + 5;
}

NOINLINE int fgt_a(int x)
{
	return fgt_b(x * 2) - 7;
}

static int find_stack(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];

	if (!f)
		return -1;
	while (fgets(line, sizeof line, f)) {
		unsigned long lo, hi;

		if (strstr(line, "[stack]") && sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
			stack_lo = lo;
			stack_hi = hi;
			fclose(f);
			return 0;
		}
	}
	fclose(f);
	return -1;
}

#define HEX(v) ((unsigned long)(v))

int main(int argc, char **argv)
{
	int r;

	if (argc != 2 || (strcmp(argv[1], "leaf") && strcmp(argv[1], "nonleaf"))) {
		fprintf(stderr, "usage: %s leaf|nonleaf\n", argv[0]);
		return 2;
	}
	leaf_mode = strcmp(argv[1], "leaf") == 0;
	if (find_stack()) {
		fprintf(stderr, "no [stack] line in /proc/self/maps\n");
		return 1;
	}
	r = fgt_a(argc);
	if (copy_overflow) {
		fprintf(stderr, "sp %#lx outside [stack] %#lx-%#lx or stack too big\n",
			HEX(regs.sp), HEX(stack_lo), HEX(stack_hi));
		return 1;
	}

	printf("arch %s\n", ARCH_NAME);
	printf("word %u\n", (unsigned)sizeof(void *));
	printf("result %d\n", r);
	printf("pc %lx\nfp %lx\nsp %lx\n", HEX(regs.pc), HEX(regs.fp), HEX(regs.sp));
	if (HAS_LR)
		printf("lr %lx\n", HEX(regs.lr));
	else
		printf("lr none\n");
	printf("stack %lx %lx\n", HEX(stack_lo), HEX(stack_hi));
	printf("text %lx %lx\n", HEX(__executable_start), HEX(etext));
	printf("func main %lx\n", HEX(&main));
	printf("func fgt_a %lx\n", HEX(&fgt_a));
	printf("func fgt_b %lx\n", HEX(&fgt_b));
	printf("func fgt_c %lx\n", HEX(&fgt_c));
	printf("func fgt_d_leaf %lx\n", HEX(&fgt_d_leaf));
	printf("func fgt_d_nonleaf %lx\n", HEX(&fgt_d_nonleaf));
	printf("func fgt_decoy %lx\n", HEX(&fgt_decoy));
	for (uintptr_t off = 0; off < copy_len; off += 32) {
		printf("mem %lx ", HEX(regs.sp + off));
		for (uintptr_t i = off; i < off + 32 && i < copy_len; i++)
			printf("%02x", stack_copy[i]);
		printf("\n");
	}
	return 0;
}

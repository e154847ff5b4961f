/* For ibv_coll_icount's test (test_cli.sh, case icount): functions written
 * in assembly, so that the instructions each executes are known exactly.
 *   icount_loop(n): 2 n + 2 (mov, n times dec and jnz, ret).
 *   icount_rep(dst, n): 16 whatever n (its rep stosb counts once, and the
 *   icount_loop(3) it calls 8).
 * main calls icount_loop(1000) twice and icount_rep(buf, 4096) three times. */
#include <stdio.h>

long icount_loop(long n);
void icount_rep(void *dst, long n);

__asm__(".text\n"
	".globl icount_loop\n"
	".type icount_loop, @function\n"
	"icount_loop:\n"
	"	mov %rdi, %rax\n"
	"1:	dec %rax\n"
	"	jnz 1b\n"
	"	ret\n"
	".size icount_loop, .-icount_loop\n"
	".globl icount_rep\n"
	".type icount_rep, @function\n"
	"icount_rep:\n"
	"	mov %rsi, %rcx\n"
	"	xor %eax, %eax\n"
	"	rep stosb\n"
	"	push %rbx\n"
	"	mov $3, %rdi\n"
	"	call icount_loop\n"
	"	pop %rbx\n"
	"	ret\n"
	".size icount_rep, .-icount_rep\n");

static unsigned char buf[4096];

int main(void)
{
	icount_loop(1000);
	icount_loop(1000);
	for (int i = 0; i < 3; i++)
		icount_rep(buf, sizeof buf);
	printf("done\n");
	return 0;
}

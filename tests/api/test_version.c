/* ibv_coll_version() and <ibv_coll/version.h> against the version CMake
 * was given (PROJECT_VERSION, passed in as WANT_VERSION), compiled as
 * pedantic C99. */
#include <ibv_coll/ibv_coll.h>
#include <ibv_coll/version.h>

#include <stdio.h>
#include <string.h>

#if IBV_COLL_VERSION != IBV_COLL_VERSION_NUM(IBV_COLL_VERSION_MAJOR, IBV_COLL_VERSION_MINOR, \
					     IBV_COLL_VERSION_PATCH)
#error "IBV_COLL_VERSION does not match its parts"
#endif
#if IBV_COLL_VERSION_NUM(1, 2, 0) <= IBV_COLL_VERSION_NUM(1, 1, 9) || \
	IBV_COLL_VERSION_NUM(2, 0, 0) <= IBV_COLL_VERSION_NUM(1, 255, 255)
#error "IBV_COLL_VERSION_NUM does not order versions"
#endif

int main(void)
{
	char parts[64];
	int bad = 0;
	snprintf(parts, sizeof(parts), "%d.%d.%d", IBV_COLL_VERSION_MAJOR, IBV_COLL_VERSION_MINOR,
		 IBV_COLL_VERSION_PATCH);
	if (strcmp(IBV_COLL_VERSION_STRING, WANT_VERSION)) {
		printf("IBV_COLL_VERSION_STRING %s, want %s\n", IBV_COLL_VERSION_STRING,
		       WANT_VERSION);
		bad = 1;
	}
	if (strcmp(parts, WANT_VERSION)) {
		printf("MAJOR.MINOR.PATCH %s, want %s\n", parts, WANT_VERSION);
		bad = 1;
	}
	if (!ibv_coll_version() || strcmp(ibv_coll_version(), WANT_VERSION)) {
		printf("ibv_coll_version() %s, want %s\n", ibv_coll_version(), WANT_VERSION);
		bad = 1;
	}
	if (!bad)
		printf("version %s everywhere\n", WANT_VERSION);
	return bad;
}

/* ibvc_version - the one --version output of every ibv_coll program. */
#include "ibvc_version.h"

#include <ibv_coll/version.h>

#include <stdio.h>
#include <string.h>

int ibvc_print_version(const char *prog, const char *lib_version)
{
	printf("%s (ibv_coll) %s\n", prog, IBV_COLL_VERSION_STRING);
	if (lib_version && strcmp(lib_version, IBV_COLL_VERSION_STRING))
		printf("libibv_coll %s (built with %s)\n", lib_version, IBV_COLL_VERSION_STRING);
	return fflush(stdout) || ferror(stdout) ? 1 : 0;
}

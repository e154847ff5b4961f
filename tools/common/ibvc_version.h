/*
 * ibvc_version - what every ibv_coll program prints for --version, so the
 * format is the same everywhere: "PROGRAM (ibv_coll) VERSION".
 *
 * A program links the static library ibvc_version (CMake target) and calls
 * ibvc_print_version() when it sees --version or -V.  Programs that load
 * libibv_coll pass ibv_coll_version(): when the library found at run time is
 * not the one the program was built with, a second line says which it is.
 */
#ifndef IBVC_VERSION_H
#define IBVC_VERSION_H

#ifdef __cplusplus
extern "C" {
#endif

/* Print the version to stdout; lib_version may be NULL.  Returns 0, the
 * exit status for the program (1 if stdout could not be written). */
int ibvc_print_version(const char *prog, const char *lib_version);

#ifdef __cplusplus
}
#endif

#endif /* IBVC_VERSION_H */

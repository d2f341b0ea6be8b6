/* A host program's own executable as its workers' and its fork server's binary, as Chromium's one
   binary serves as its renderers (docs/host.md, "Binaries").

   Where the program has no `plugin-worker` to run (a package that depends on PluginHost builds
   none), its embedded supervisor starts `/proc/self/exe` with a role in the environment, and this
   constructor, which runs before the program's `main` (and before any of the program's own Swift
   code), sends the process to that role instead:

   - SP_PROCESS_ROLE=worker: the worker, `sp_worker_main` (PluginWorker, linked into PluginHost),
     exactly as `plugin-worker` runs it; the variable is removed first, and the process is named
     `plugin-worker` as an exec'd worker is.
   - SP_FORKSERVER_LIBRARY=@program with SP_FORKSERVER_PARENT: the fork server (CForkServer), with
     the worker's code already here instead of dlopen'ing libPluginWorkerCore.so. It stays C, runs
     no Swift code, and forks at one thread, as `plugin-forkserver` does.

   Neither set (the program started as itself): it returns, and `main` runs. The constructor has
   the default priority, so the executable's Swift image has registered its metadata (swiftrt.o's
   constructor, linked first) before the worker's Swift code runs. */
#define _GNU_SOURCE
#include "process_roles.h"
#include "fork_server.h"
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

/* The worker's entry (PluginWorker's `@_cdecl("sp_worker_main")`), linked into the program with
   PluginHost; weak, so that this file links on its own. */
extern int sp_worker_main(void) __attribute__((weak));

int sp_program_serves_workers(void) { return sp_worker_main != 0; }

/* Named as `plugin-worker` is, in ps, /proc/<pid>/cmdline and comm. */
static void name_worker(char **argv) {
    if (!argv || !argv[0]) return;
    size_t room = strlen(argv[0]);
    memset(argv[0], 0, room);
    strncpy(argv[0], "plugin-worker", room);
    prctl(PR_SET_NAME, "plugin-worker", 0, 0, 0);
}

__attribute__((constructor))
static void sp_process_role(int argc, char **argv, char **envp) {
    (void)envp;
    if (!sp_worker_main) return;
    const char *role = getenv("SP_PROCESS_ROLE");
    if (role && strcmp(role, "worker") == 0) {
        unsetenv("SP_PROCESS_ROLE");
        name_worker(argv);
        exit(sp_worker_main());
    }
    const char *library = getenv("SP_FORKSERVER_LIBRARY");
    if (library && strcmp(library, SP_FORKSERVER_PROGRAM) == 0 && getenv("SP_FORKSERVER_PARENT")) {
        exit(sp_fork_server_run(argc, argv, sp_worker_main));
    }
}

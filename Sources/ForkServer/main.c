/* plugin-forkserver: starts workers by fork instead of exec (`workerStart: "fork-server"`,
   docs/sandbox.md "The fork server"). The server itself is CForkServer's `sp_fork_server_run`,
   which a host program's own executable runs too (Sources/CProcessRoles); this one loads the
   worker's code from libPluginWorkerCore.so (SP_FORKSERVER_LIBRARY). */
#include "fork_server.h"

int main(int argc, char **argv) {
    return sp_fork_server_run(argc, argv, 0);
}

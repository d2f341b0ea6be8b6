// plugin-worker: the worker as an executable of its own (`workerStart: "exec"`, installs' preflight).
// Everything it does is in PluginWorker's `workerMain`, which the fork server's children and a host
// program started as its own worker (Sources/CProcessRoles) run too.
import PluginWorker

_ = workerMain()

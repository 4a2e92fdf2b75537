"""One job to one library: the job (job), the generated CMake project (cmake), compiler
caches and how many compiles run at once; one module per backend under compile/backends."""

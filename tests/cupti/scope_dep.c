// SPDX-License-Identifier: Apache-2.0
/*
 * libscopedep.so: a dependency of the dlsym-resolving client (user_prof.c). A symbol only its
 * dependents' lookup scope holds, for checking that our dlsym interposition keeps the caller's
 * RTLD_DEFAULT and RTLD_NEXT semantics.
 */
#define EXPORT __attribute__((visibility("default")))

EXPORT int scope_dep_fn(void)
{
	return 42;
}

/* tr_api.h — what marks a declaration as part of troupe's public surface.
 *
 * libtroupe is built with hidden symbol visibility: only what a public header declares with
 * TR_API is exported from the shared library, so `nm -D libtroupe.so` lists the API and no
 * internal (tr__) name. Every public header includes this one; a program never needs it.
 *
 *   TR_API int tr_device_list_open(tr_device_list **out, const char *spec, char *err,
 *                                  size_t err_size);
 *   TR_API extern const tr_msgtype tr_batch_type;
 *
 * TR_DEPRECATED("what replaces it") marks a call kept for the programs written against it
 * (CHANGELOG.md says since when, and what replaces it): a program that uses it compiles, with
 * a warning naming the replacement. A program that means to use it defines
 * TR_NO_DEPRECATION_WARNINGS before it includes troupe's headers.
 */
#ifndef TR_API_H
#define TR_API_H

#if defined(__GNUC__) || defined(__clang__)
#define TR_API __attribute__((visibility("default")))
#else
#define TR_API
#endif

#if (defined(__GNUC__) || defined(__clang__)) && !defined(TR_NO_DEPRECATION_WARNINGS)
#define TR_DEPRECATED(replacement) __attribute__((deprecated(replacement)))
#else
#define TR_DEPRECATED(replacement)
#endif

#endif

/*
 * mock_env.h - reading the mocks' environment: a size with an optional K/M/G/T suffix (binary).
 */
#ifndef MOCK_ENV_H
#define MOCK_ENV_H

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

static unsigned long long mock_parse_size(const char *s, unsigned long long dflt)
{
    if (!s || !*s) return dflt;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s) return dflt;
    while (*end == ' ') end++;
    switch (toupper((unsigned char)*end)) {
    case 'K': v *= 1024.0; break;
    case 'M': v *= 1024.0 * 1024; break;
    case 'G': v *= 1024.0 * 1024 * 1024; break;
    case 'T': v *= 1024.0 * 1024 * 1024 * 1024; break;
    default: break;
    }
    return (unsigned long long)v;
}

#endif

/*
 * bcryptprimitives.dll for Wine 8 (Debian 12), which lacks it: Rust's
 * standard library for Windows (1.78 and later) takes its random bytes from
 * ProcessPrng there, and a program that imports a missing DLL does not
 * start. Wine 9 has the DLL; on Windows it is part of the system. Built and
 * installed into the Wine prefix by checks/portable/wine.sh; never part of
 * fgtrace.
 */
#include <windows.h>

/* RtlGenRandom, exported by advapi32 under this name. */
BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG n = len > 0x10000000 ? 0x10000000 : (ULONG)len;
        if (!SystemFunction036(data, n))
            return FALSE;
        data += n;
        len -= n;
    }
    return TRUE;
}

/* ref-forward: what an HTTP status means for check-engine (refwd_http.h).
 * No network here, so that the fuzz target of the queries links it. */
#include <stdio.h>

#include "refwd_http.h"

int refwd_http_status(const char *method, const char *url, long status, const char *body,
                      size_t len, gguf_error *err)
{
    if (status >= 200 && status < 300)
        return 0;
    char msg[400];
    gguf_engine_error_message(body, len, msg, sizeof msg);
    const int code = status >= 500 || status < 100     ? GGUF_E_IO
                     : (status == 404 || status == 405) ? GGUF_E_NOT_FOUND
                                                        : GGUF_E_UNSUPPORTED;
    return gguf_error_setf(err, code, 0, "%s %s: HTTP %ld%s%s", method, url, status,
                           msg[0] ? ": " : "", msg);
}

# Varnish with its built-in VCL and nothing else: what a site starts from. The origin's
# `Vary: User-Agent` makes one variant per User-Agent string; query strings are raw.
vcl 4.1;

backend origin {
    .host = "127.0.0.1";
    .port = "ORIGIN_PORT";
}

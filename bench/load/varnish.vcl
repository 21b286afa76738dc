# scripts/bench-load: Varnish 7.1 in front of the demo origin. The CSS is stored gzip
# (beresp.do_gzip), as Cachet stores it, so a gzip client gets the same ~1.4 KiB body from
# both; everything else is Varnish's builtin VCL. @ORIGIN@ is filled in by the script.
vcl 4.1;

backend origin {
  .host = "127.0.0.1";
  .port = "@ORIGIN@";
}

sub vcl_backend_response {
  if (beresp.http.content-type ~ "^text/css") {
    set beresp.do_gzip = true;
  }
}

# A hand-written best-practice VCL for the demo blog platform: what an experienced Varnish
# operator would write to get the seed's results without Cachet (Hatena Blog on Varnish,
# 2020). Same rules as Cachet's built-in configuration where VCL can express them:
# device class PC / smartphone by Hatena's three-line rule (not Cachet's accurate profile),
# tracking parameters removed and the query sorted (std.querysort), Vary rewritten from
# User-Agent to the device header, feeds and CSS shared by all devices, private pages
# passed, grace for stale serving.
vcl 4.1;
import std;

backend origin {
    .host = "127.0.0.1";
    .port = "ORIGIN_PORT";
}

sub vcl_recv {
    unset req.http.X-Cachet-Device;
    if (req.http.Authorization || req.url ~ "^/account" || req.url ~ "^/api/") {
        return (pass);
    }
    if (req.http.User-Agent ~ "iPad") {
        set req.http.X-Cachet-Device = "pc";
    } elsif (req.http.User-Agent ~ "Mobile") {
        set req.http.X-Cachet-Device = "smartphone";
    } else {
        set req.http.X-Cachet-Device = "pc";
    }
    # Drop tracking parameters, then empty separators, then sort.
    set req.url = regsuball(req.url,
        "([?&])(utm_[^=&]*|_ga|_gl|gclid|fbclid|yclid|msclkid|__twitter_impression)=[^&]*", "\1");
    set req.url = regsuball(req.url, "&{2,}", "&");
    set req.url = regsub(req.url, "\?&", "?");
    set req.url = regsub(req.url, "[?&]$", "");
    set req.url = std.querysort(req.url);
    unset req.http.Cookie;
    return (hash);
}

sub vcl_hash {
    hash_data(req.url);
    if (req.http.host) {
        hash_data(req.http.host);
    }
    if (req.url !~ "^/css/" && req.url !~ "/feed$" && req.url !~ "^/static/") {
        hash_data(req.http.X-Cachet-Device);
    }
    return (lookup);
}

sub vcl_backend_response {
    if (beresp.http.Vary) {
        set beresp.http.Vary = regsub(beresp.http.Vary, "(?i)User-Agent", "X-Cachet-Device");
    }
    if (bereq.url ~ "^/css/" || bereq.url ~ "/feed$" || bereq.url ~ "^/static/") {
        unset beresp.http.Vary;
    }
    set beresp.grace = 1h;
    if (beresp.http.Set-Cookie || beresp.http.Cache-Control ~ "(private|no-store)") {
        set beresp.uncacheable = true;
        set beresp.ttl = 120s;
        return (deliver);
    }
}

#!/bin/sh
# build.sh WASM OUT -- assemble the self-contained explainer page: the HTML
# template with the CSS, the wasm module (base64) and the JS inlined at its
# /*@CSS@*/, /*@WASM@*/ and /*@JS@*/ lines (the walk's script, then the
# second part's, explainer_kernel.js). The result loads nothing else.
# The module sits in a script element of its own type, which the browser
# keeps as text instead of compiling it as JavaScript.
set -eu
wasm=$1
out=$2
dir=$(dirname "$0")
tmp="$out.tmp"
while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in
    '/*@CSS@*/') cat "$dir/explainer.css" ;;
    '/*@WASM@*/') base64 -w0 "$wasm"; echo ;;
    '/*@JS@*/') cat "$dir/explainer.js" "$dir/explainer_kernel.js" ;;
    *) printf '%s\n' "$line" ;;
    esac
done <"$dir/explainer.html" >"$tmp"
mv "$tmp" "$out"

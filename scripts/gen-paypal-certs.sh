#!/usr/bin/env bash
# Generates the TEST-ONLY PKI for PayPal offline webhook verification into
# fixtures/paypal/certs/. The outputs are committed so tests never need openssl;
# rerun this only to rotate them (tests derive their clock from leaf.pem, so
# fresh certificates keep working).
#
#   root.pem / root.key                 test root CA ("reconciler test PayPal root")
#   intermediate.pem / intermediate.key intermediate CA signed by the root
#   leaf.pem, leaf.key, leaf-chain.pem  CN=messageverificationcerts.test.paypal.example
#                                       (chain = leaf + intermediate), valid 10 years
#   expired-chain.pem, expired.key      same CN, valid for 1 day only
#   wrongcn-chain.pem, wrongcn.key      CN=messageverificationcerts.test.paypal.example.evil.test
#                                       (contains the suffix, does not end with it)
#   untrusted-root.pem, untrusted-chain.pem, untrusted.key
#                                       right CN, signed by a root the tests do not trust
#
# These keys are public in the repository: never trust them outside tests.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$here/fixtures/paypal/certs}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$out"

cn=messageverificationcerts.test.paypal.example
bad_cn=messageverificationcerts.test.paypal.example.evil.test

serial() { openssl rand -hex 16; }

ca_ext="basicConstraints=critical,CA:TRUE
keyUsage=critical,keyCertSign,cRLSign
subjectKeyIdentifier=hash"

# selfsigned NAME SUBJECT DAYS: a root CA.
selfsigned() {
	openssl req -x509 -newkey rsa:2048 -nodes -sha256 -keyout "$1.key" -out "$1.pem" \
		-subj "$2" -days "$3" -set_serial "0x$(serial)" \
		-addext "basicConstraints=critical,CA:TRUE" \
		-addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}

# issue NAME SUBJECT DAYS ISSUER EXT: a certificate for a fresh key, signed by ISSUER.
issue() {
	openssl req -new -newkey rsa:2048 -nodes -sha256 -keyout "$1.key" -out "$tmp/$1.csr" \
		-subj "$2" 2>/dev/null
	printf '%s\n' "$5" >"$tmp/$1.ext"
	openssl x509 -req -sha256 -in "$tmp/$1.csr" -CA "$4.pem" -CAkey "$4.key" \
		-set_serial "0x$(serial)" -days "$3" -extfile "$tmp/$1.ext" -out "$1.pem" 2>/dev/null
}

leaf_ext() {
	printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nsubjectAltName=DNS:%s\n' "$1"
}

selfsigned root "/O=reconciler test/CN=reconciler test PayPal root" 7300
issue intermediate "/O=reconciler test/CN=reconciler test PayPal intermediate" 5475 root "$ca_ext"

issue leaf "/O=reconciler test/CN=$cn" 3650 intermediate "$(leaf_ext $cn)"
cat leaf.pem intermediate.pem >leaf-chain.pem

issue expired "/O=reconciler test/CN=$cn" 1 intermediate "$(leaf_ext $cn)"
cat expired.pem intermediate.pem >expired-chain.pem
rm expired.pem

issue wrongcn "/O=reconciler test/CN=$bad_cn" 3650 intermediate "$(leaf_ext $bad_cn)"
cat wrongcn.pem intermediate.pem >wrongcn-chain.pem
rm wrongcn.pem

selfsigned untrusted-root "/O=reconciler test/CN=untrusted test root" 7300
issue untrusted "/O=reconciler test/CN=$cn" 3650 untrusted-root "$(leaf_ext $cn)"
cat untrusted.pem >untrusted-chain.pem
rm untrusted.pem untrusted-root.key

chmod 644 ./*.key # test-only keys, readable by any build user
openssl verify -CAfile root.pem -untrusted intermediate.pem leaf.pem >/dev/null
echo "wrote test PayPal PKI to $out"

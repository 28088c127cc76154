#!/usr/bin/env bash
# Makes the TLS material the tests use (committed under Tests/Fixtures/tls, valid for 100 years) and, with a
# directory argument, the throwaway material `make run` uses (.dev/). Never use any of it in production.
#
#   ca.pem / ca.key          a test CA
#   server.pem / server.key  127.0.0.1 and localhost, signed by the test CA
#   wrong-host.pem / .key    signed by the test CA, but only for wrong.example (host-name check must fail)
#   untrusted.pem / .key     127.0.0.1, signed by a CA nobody trusts (chain check must fail)
#   apns-key.p8 / .pub.pem   an ES256 (P-256) signing key like Apple's .p8, and its public key
set -euo pipefail
out=${1:-"$(dirname "$0")/../Tests/Fixtures/tls"}
mkdir -p "$out"
cd "$out"
days=36500

openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
openssl req -x509 -new -key ca.key -sha256 -days $days -subj "/CN=KumaPush Test CA" -out ca.pem 2>/dev/null

issue() { # name, subjectAltName, ca-cert, ca-key
  openssl ecparam -name prime256v1 -genkey -noout -out "$1.key" 2>/dev/null
  openssl req -new -key "$1.key" -subj "/CN=$1" -out "$1.csr" 2>/dev/null
  printf "subjectAltName=%s\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n" "$2" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$3" -CAkey "$4" -CAcreateserial -days $days -sha256 -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
issue server "IP:127.0.0.1,DNS:localhost" ca.pem ca.key
issue wrong-host "DNS:wrong.example" ca.pem ca.key

openssl ecparam -name prime256v1 -genkey -noout -out other-ca.key 2>/dev/null
openssl req -x509 -new -key other-ca.key -sha256 -days $days -subj "/CN=Untrusted CA" -out other-ca.pem 2>/dev/null
issue untrusted "IP:127.0.0.1,DNS:localhost" other-ca.pem other-ca.key
rm -f other-ca.key other-ca.pem ./*.srl

openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out apns-key.p8 2>/dev/null
openssl pkey -in apns-key.p8 -pubout -out apns-key.pub.pem 2>/dev/null
chmod 600 ./*.key apns-key.p8
echo "TLS material in $out"

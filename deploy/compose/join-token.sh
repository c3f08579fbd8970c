#!/bin/sh
# Signs in as the demo operator and writes a join token for $JOIN_REGION
# to /join/token, where the agents read it. Runs once; a token already
# written is kept (agents that registered keep their own credential).
set -eu
[ -s /join/token ] && exit 0
login=$(curl -fsS -X POST "$API_URL/api/v1/auth/login" \
  -H 'content-type: application/json' \
  -d '{"email":"operator@demo.gantry.dev","password":"gantry operator demo"}')
access=$(printf '%s' "$login" | sed -n 's/.*"access_token":"\([^"]*\)".*/\1/p')
created=$(curl -fsS -X POST "$API_URL/api/v1/admin/join-tokens" \
  -H "authorization: Bearer $access" -H 'content-type: application/json' \
  -d "{\"region\":\"$JOIN_REGION\",\"expires_in_seconds\":86400}")
printf '%s' "$created" | sed -n 's/.*"token":"\([^"]*\)".*/\1/p' > /join/token.new
test -s /join/token.new
mv /join/token.new /join/token

// A certified OpenID provider (the oidc-provider package) for single
// sign-on tests. It prints its port, then signs in whoever the test set
// with POST /control/next, completing the login and consent steps itself,
// so that tests drive the real authorization code flow without a form.
// POST /control/wrong-audience makes its next ID tokens name another
// client as their audience, signed with its own key, as a token stolen
// from another application would be.
import http from "node:http";

import * as jose from "jose";
import Provider from "oidc-provider";

const [clientId, clientSecret] = process.argv.slice(2);
if (!clientId || !clientSecret) {
  console.error("usage: node provider.mjs CLIENT_ID CLIENT_SECRET");
  process.exit(2);
}

const { privateKey } = await jose.generateKeyPair("RS256", { extractable: true });
const jwk = { ...(await jose.exportJWK(privateKey)), kid: "test", alg: "RS256", use: "sig" };

let next = { sub: "ada", email: "ada@example.com", email_verified: true, name: "Ada" };
let wrongAudience = false;

const server = http.createServer();
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const { port } = server.address();
const issuer = `http://127.0.0.1:${port}`;

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: clientId,
      client_secret: clientSecret,
      // The server under test picks its port after this starts: any
      // loopback callback is allowed below.
      redirect_uris: ["http://127.0.0.1/placeholder"],
      application_type: "native",
    },
  ],
  jwks: { keys: [jwk] },
  cookies: {
    keys: ["a test cookie key"],
    long: { sameSite: "lax", secure: false },
    short: { sameSite: "lax", secure: false },
  },
  claims: { openid: ["sub"], email: ["email", "email_verified"], profile: ["name", "groups"] },
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  features: { devInteractions: { enabled: false } },
  findAccount: async (_ctx, sub) => ({
    accountId: sub,
    claims: async () => ({ ...next, sub }),
  }),
  interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
});
provider.Client.prototype.redirectUriAllowed = (uri) => uri.startsWith("http://127.0.0.1:");

provider.use(async (ctx, nextMiddleware) => {
  if (ctx.method === "POST" && ctx.path.startsWith("/control/")) {
    const body = await new Promise((resolve) => {
      let text = "";
      ctx.req.on("data", (chunk) => (text += chunk));
      ctx.req.on("end", () => resolve(text ? JSON.parse(text) : {}));
    });
    if (ctx.path === "/control/next") next = body;
    if (ctx.path === "/control/wrong-audience") wrongAudience = body.on === true;
    ctx.status = 204;
    return;
  }
  if (ctx.method === "GET" && ctx.path.startsWith("/interaction/")) {
    const details = await provider.interactionDetails(ctx.req, ctx.res);
    let result;
    if (details.prompt.name === "login") {
      result = { login: { accountId: next.sub } };
    } else {
      const grant = details.grantId
        ? await provider.Grant.find(details.grantId)
        : new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
      grant.addOIDCScope(details.params.scope);
      result = { consent: { grantId: await grant.save() } };
    }
    ctx.respond = false;
    await provider.interactionFinished(ctx.req, ctx.res, result, { mergeWithLastSubmission: true });
    return;
  }
  await nextMiddleware();
  if (wrongAudience && ctx.path === "/token" && ctx.body && ctx.body.id_token) {
    const claims = jose.decodeJwt(ctx.body.id_token);
    ctx.body = {
      ...ctx.body,
      id_token: await new jose.SignJWT({ ...claims, aud: "another-application" })
        .setProtectedHeader({ alg: "RS256", kid: "test" })
        .sign(privateKey),
    };
  }
});

server.on("request", provider.callback());
console.log(port);

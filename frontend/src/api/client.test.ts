import { describe, expect, test } from "vitest";
import { ApiError, unwrap, unwrapJson } from "./client";
import { safeNext, session } from "./session";

const answer = <T>(status: number, body: { data?: T; error?: unknown }) =>
  Promise.resolve({ ...body, response: new Response(null, { status }) });

describe("unwrap", () => {
  test("returns the body of a success", async () => {
    await expect(unwrap(answer(200, { data: { id: 1 } }))).resolves.toEqual({ id: 1 });
  });

  test("turns problem+json into an ApiError with the server's words", async () => {
    const problem = {
      type: "urn:gantry:problem:validation",
      title: "Unprocessable Entity",
      status: 422,
      detail: "the request has invalid fields",
      code: "validation_failed",
      errors: [{ field: "node_count", message: "must be between 1 and 64" }],
    };
    const error = await unwrap(answer(422, { error: problem })).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ApiError);
    expect(error).toMatchObject({ status: 422, code: "validation_failed", message: "the request has invalid fields" });
    expect((error as ApiError).fieldErrors).toEqual(problem.errors);
  });

  test("says so when the server cannot be reached", async () => {
    const error = await unwrap(Promise.reject(new TypeError("fetch failed"))).catch((e: unknown) => e);
    expect(error).toMatchObject({ status: 0, message: expect.stringMatching(/could not be reached/) });
  });

  test("refuses CSV where JSON was asked for", async () => {
    await expect(unwrapJson(answer<string | { a: number }>(200, { data: "a,b\n" }))).rejects.toBeInstanceOf(ApiError);
  });
});

describe("session", () => {
  test("an expired token is not used, and a refused renewal ends the session", async () => {
    const refused = async () => new Response(null, { status: 401 });
    globalThis.fetch = refused as typeof fetch;
    session.signIn("token", 60);
    expect(session.token()).toBe("token");
    await expect(session.fresh()).resolves.toBe("token");
    session.signIn("old", -1);
    expect(session.token()).toBeNull();
    await expect(session.fresh()).resolves.toBeNull();
    expect(session.status()).toEqual({ state: null, expired: true });
    await session.signOut();
    expect(session.status()).toEqual({ state: null, expired: false });
  });

  test("a token about to run out is renewed once, however many ask", async () => {
    let calls = 0;
    globalThis.fetch = (async () => {
      calls += 1;
      return Response.json({ access_token: "renewed", expires_in: 900 });
    }) as typeof fetch;
    session.signIn("ending", 10);
    const tokens = await Promise.all([session.fresh(), session.fresh(), session.fresh()]);
    expect(tokens).toEqual(["renewed", "renewed", "renewed"]);
    expect(calls).toBe(1);
    expect(session.token()).toBe("renewed");
  });

  test("next never points back at the sign-in page, or off this console", () => {
    expect(safeNext("/orgs/1/orders?x=1")).toBe("/orgs/1/orders?x=1");
    expect(safeNext("/sign-in?next=%2Fsign-in%3Fnext%3D%252F")).toBeUndefined();
    expect(safeNext("/sign-up")).toBeUndefined();
    expect(safeNext("//evil.example.com")).toBeUndefined();
    expect(safeNext("https://evil.example.com")).toBeUndefined();
    expect(safeNext(undefined)).toBeUndefined();
    expect(safeNext("/sign-inside")).toBe("/sign-inside");
  });
});

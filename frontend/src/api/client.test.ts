import { describe, expect, test } from "vitest";
import { ApiError, unwrap, unwrapJson } from "./client";
import { session } from "./session";

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
  test("an expired token is dropped and the expiry is remembered", () => {
    session.signIn("token", 60);
    expect(session.token()).toBe("token");
    session.signIn("old", -1);
    expect(session.token()).toBeNull();
    expect(session.status()).toEqual({ state: null, expired: true });
    session.signOut();
    expect(session.status()).toEqual({ state: null, expired: false });
  });
});

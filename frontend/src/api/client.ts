// The one API client: generated types from openapi/openapi.json, the
// session's bearer token on every call, and problem+json turned into
// ApiError in one place.
import createClient from "openapi-fetch";
import type { components, paths } from "./schema.gen";
import { session } from "./session";

export type Schemas = components["schemas"];
export type Problem = Schemas["Problem"];

export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly fieldErrors: { field: string; message: string }[];
  /** For a window of capacity that is taken: the ones that would fit. */
  readonly alternatives: Schemas["Window"][];

  constructor(status: number, problem: Partial<Problem> | undefined) {
    super(problem?.detail || problem?.title || `the server answered ${status}`);
    this.name = "ApiError";
    this.status = status;
    this.code = problem?.code ?? "unknown";
    this.fieldErrors = problem?.errors ?? [];
    this.alternatives = problem?.alternatives ?? [];
  }
}

export const api = createClient<paths>({
  baseUrl: typeof window === "undefined" ? "http://localhost" : window.location.origin,
});

api.use({
  async onRequest({ request }) {
    // Signing in and renewing need no token, and must not wait for one.
    const token = new URL(request.url).pathname.startsWith("/api/v1/auth/") ? null : await session.fresh();
    if (token) request.headers.set("Authorization", `Bearer ${token}`);
    return request;
  },
  onResponse({ response }) {
    // An expired or revoked session: back to sign-in, saying why.
    if (response.status === 401 && session.token()) session.expire();
    return response;
  },
});

type Answer<T> = { data?: T; error?: unknown; response: Response };

/** The answer's body, or an ApiError carrying the server's problem. */
export async function unwrap<T>(call: Promise<Answer<T>>): Promise<T> {
  let answer: Answer<T>;
  try {
    answer = await call;
  } catch {
    throw new ApiError(0, { detail: "the server could not be reached; check your connection" });
  }
  if (!answer.response.ok) {
    throw new ApiError(answer.response.status, answer.error as Partial<Problem> | undefined);
  }
  return answer.data as T;
}

/**
 * For routes that can also answer text (CSV, an event stream): the JSON
 * answer, which is what a call without those options gets.
 */
export async function unwrapJson<T>(call: Promise<Answer<T>>): Promise<Exclude<T, string>> {
  const answer = await unwrap(call);
  if (typeof answer === "string") throw new ApiError(0, { detail: "the server answered text where JSON was asked for" });
  return answer as Exclude<T, string>;
}

/** A short human message for any error a query or mutation throws. */
export function messageOf(error: unknown): string {
  if (error instanceof ApiError) return error.message;
  if (error instanceof Error) return error.message;
  return String(error);
}

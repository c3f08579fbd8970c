import { Alert, Button, PasswordInput, Stack, TextInput } from "@mantine/core";
import { useForm } from "@mantine/form";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useNavigate, useSearch } from "@tanstack/react-router";
import { api, unwrap } from "../api/client";
import { safeNext, session, useSession } from "../api/session";
import { ProblemAlert } from "../components/Loadable";
import { AuthFrame } from "./AuthFrame";
import { AnchorLink } from "../components/links";

export function SignInPage() {
  const { next } = useSearch({ from: "/sign-in" });
  const { expired } = useSession();
  const navigate = useNavigate();
  const queryClient = useQueryClient();
  const form = useForm({
    initialValues: { email: "", password: "" },
    validate: {
      email: (v) => (/^\S+@\S+$/.test(v) ? null : "Enter your email address"),
      password: (v) => (v ? null : "Enter your password"),
    },
  });
  const signIn = useMutation({
    mutationFn: (body: { email: string; password: string }) =>
      unwrap(api.POST("/api/v1/auth/login", { body })),
    onSuccess: (token) => {
      queryClient.clear();
      session.signIn(token.access_token, token.expires_in);
      const back = safeNext(next);
      if (back) window.location.assign(back);
      else void navigate({ to: "/" });
    },
  });
  return (
    <AuthFrame
      title="Sign in"
      footer={
        <>
          New here?{" "}
          <AnchorLink to="/sign-up">
            Create an account
          </AnchorLink>
        </>
      }
    >
      {expired && !signIn.isPending && (
        <Alert color="yellow">Your session expired. Sign in again to continue.</Alert>
      )}
      <form onSubmit={form.onSubmit((values) => signIn.mutate(values))} noValidate>
        <Stack>
          <TextInput label="Email" type="email" autoComplete="username" required {...form.getInputProps("email")} />
          <PasswordInput label="Password" autoComplete="current-password" required {...form.getInputProps("password")} />
          {signIn.isError && <ProblemAlert error={signIn.error} title="Could not sign in" />}
          <Button type="submit" loading={signIn.isPending}>
            Sign in
          </Button>
        </Stack>
      </form>
    </AuthFrame>
  );
}

import { Button, PasswordInput, Stack, TextInput } from "@mantine/core";
import { useForm } from "@mantine/form";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useNavigate } from "@tanstack/react-router";
import { api, ApiError, unwrap } from "../api/client";
import { session } from "../api/session";
import { ProblemAlert } from "../components/Loadable";
import { AuthFrame } from "./AuthFrame";
import { AnchorLink } from "../components/links";

const MIN_PASSWORD = 10;

export function SignUpPage() {
  const navigate = useNavigate();
  const queryClient = useQueryClient();
  const form = useForm({
    initialValues: { name: "", email: "", organization: "", password: "" },
    validate: {
      name: (v) => (v.trim() ? null : "Enter your name"),
      email: (v) => (/^\S+@\S+$/.test(v) ? null : "Enter an email address"),
      organization: (v) => (v.trim() ? null : "Name your organization"),
      password: (v) => (v.length >= MIN_PASSWORD ? null : `Use at least ${MIN_PASSWORD} characters`),
    },
  });
  const signUp = useMutation({
    mutationFn: (body: typeof form.values) => unwrap(api.POST("/api/v1/auth/signup", { body })),
    onSuccess: (answer) => {
      queryClient.clear();
      session.signIn(answer.access_token, answer.expires_in);
      void navigate({ to: "/orgs/$orgId", params: { orgId: answer.organization.id } });
    },
    onError: (error) => {
      // Field-level refusals go beside their fields.
      if (error instanceof ApiError) {
        for (const field of error.fieldErrors) form.setFieldError(field.field, field.message);
      }
    },
  });
  return (
    <AuthFrame
      title="Create your account"
      footer={
        <>
          Already have an account?{" "}
          <AnchorLink to="/sign-in">
            Sign in
          </AnchorLink>
        </>
      }
    >
      <form onSubmit={form.onSubmit((values) => signUp.mutate(values))} noValidate>
        <Stack>
          <TextInput label="Your name" autoComplete="name" required {...form.getInputProps("name")} />
          <TextInput label="Email" type="email" autoComplete="email" required {...form.getInputProps("email")} />
          <TextInput
            label="Organization"
            description="Your team or company; you will own it."
            required
            {...form.getInputProps("organization")}
          />
          <PasswordInput
            label="Password"
            description={`At least ${MIN_PASSWORD} characters.`}
            autoComplete="new-password"
            required
            {...form.getInputProps("password")}
          />
          {signUp.isError && <ProblemAlert error={signUp.error} title="Could not create the account" />}
          <Button type="submit" loading={signUp.isPending}>
            Create account
          </Button>
        </Stack>
      </form>
    </AuthFrame>
  );
}

import { Alert, Button, PasswordInput, Stack, TextInput } from "@mantine/core";
import { useForm } from "@mantine/form";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useNavigate, useSearch } from "@tanstack/react-router";
import { api, unwrap } from "../api/client";
import { safeNext, session, useSession } from "../api/session";
import { ProblemAlert } from "../components/Loadable";
import { AuthFrame } from "./AuthFrame";
import { AnchorLink } from "../components/links";
import { useTranslation } from "react-i18next";

export function SignInPage() {
  const { next } = useSearch({ from: "/sign-in" });
  const { expired } = useSession();
  const navigate = useNavigate();
  const queryClient = useQueryClient();
  const { t } = useTranslation();
  const form = useForm({
    initialValues: { email: "", password: "" },
    validate: {
      email: (v) => (/^\S+@\S+$/.test(v) ? null : t("auth.enterEmail")),
      password: (v) => (v ? null : t("auth.enterPassword")),
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
      title={t("auth.signIn")}
      footer={
        <>
          {t("auth.newHere")}{" "}
          <AnchorLink to="/sign-up">{t("auth.createAccountLink")}</AnchorLink>
        </>
      }
    >
      {expired && !signIn.isPending && (
        <Alert color="yellow">{t("auth.expired")}</Alert>
      )}
      <form onSubmit={form.onSubmit((values) => signIn.mutate(values))} noValidate>
        <Stack>
          <TextInput label={t("auth.email")} type="email" autoComplete="username" required {...form.getInputProps("email")} />
          <PasswordInput label={t("auth.password")} autoComplete="current-password" required {...form.getInputProps("password")} />
          {signIn.isError && <ProblemAlert error={signIn.error} title={t("auth.couldNotSignIn")} />}
          <Button type="submit" loading={signIn.isPending}>
            {t("auth.signIn")}
          </Button>
        </Stack>
      </form>
    </AuthFrame>
  );
}

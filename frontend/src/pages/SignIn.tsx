import { Alert, Button, Divider, PasswordInput, Stack, TextInput } from "@mantine/core";
import { useForm } from "@mantine/form";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useNavigate, useSearch } from "@tanstack/react-router";
import { api, unwrap } from "../api/client";
import { safeNext, session, useSession } from "../api/session";
import { ProblemAlert } from "../components/Loadable";
import { AuthFrame } from "./AuthFrame";
import { AnchorLink } from "../components/links";
import { useTranslation } from "react-i18next";

/** The refusals the server names when single sign-on sends the browser back. */
const SSO_ERRORS = [
  "state_invalid",
  "provider_refused",
  "token_invalid",
  "email_missing",
  "email_unverified",
  "domain_not_allowed",
] as const;

export function SignInPage() {
  const { t } = useTranslation();
  const { next, sso_error: ssoError, sso_provider: ssoProvider } = useSearch({ from: "/sign-in" });
  const options = useQuery({
    queryKey: ["sign-in-options"],
    queryFn: () => unwrap(api.GET("/api/v1/auth/sign-in-options")),
    staleTime: Infinity,
  });
  const providers = options.data?.providers ?? [];
  const passwords = options.data?.password ?? true;
  const providerName = providers.find((p) => p.name === ssoProvider)?.display_name ?? ssoProvider ?? "";
  const ssoMessage = ssoError
    ? (SSO_ERRORS as readonly string[]).includes(ssoError)
      ? t(`auth.sso.${ssoError}`, { provider: providerName })
      : t("auth.sso.other")
    : null;
  const { expired } = useSession();
  const navigate = useNavigate();
  const queryClient = useQueryClient();
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
  const startUrl = (start: string) => (next ? `${start}?next=${encodeURIComponent(next)}` : start);
  return (
    <AuthFrame
      title={t("auth.signIn")}
      footer={
        passwords ? (
          <>
            {t("auth.newHere")}{" "}
            <AnchorLink to="/sign-up">{t("auth.createAccountLink")}</AnchorLink>
          </>
        ) : null
      }
    >
      {expired && !signIn.isPending && (
        <Alert color="yellow">{t("auth.expired")}</Alert>
      )}
      {ssoMessage && (
        <Alert color="red" title={t("auth.ssoFailed")}>
          {ssoMessage}
        </Alert>
      )}
      {providers.length > 0 && (
        <Stack gap="xs">
          {providers.map((provider) => (
            <Button key={provider.name} component="a" href={startUrl(provider.start_url)} variant="default">
              {t("auth.signInWith", { name: provider.display_name })}
            </Button>
          ))}
        </Stack>
      )}
      {providers.length > 0 && passwords && <Divider label={t("auth.orWithPassword")} labelPosition="center" />}
      {passwords ? (
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
      ) : (
        <Alert color="gray">{t("auth.passwordOff")}</Alert>
      )}
    </AuthFrame>
  );
}

import { Alert, Button, PasswordInput, Stack, TextInput } from "@mantine/core";
import { useForm } from "@mantine/form";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useNavigate, useSearch } from "@tanstack/react-router";
import { api, ApiError, unwrap } from "../api/client";
import { session } from "../api/session";
import { ProblemAlert } from "../components/Loadable";
import { AuthFrame } from "./AuthFrame";
import { AnchorLink } from "../components/links";
import { useTranslation } from "react-i18next";

const MIN_PASSWORD = 10;

export function SignUpPage() {
  const navigate = useNavigate();
  const queryClient = useQueryClient();
  const { t } = useTranslation();
  const { invited } = useSearch({ strict: false }) as { invited?: string };
  const form = useForm({
    initialValues: { name: "", email: invited ?? "", organization: "", password: "" },
    validate: {
      name: (v) => (v.trim() ? null : t("auth.enterName")),
      email: (v) => (/^\S+@\S+$/.test(v) ? null : t("auth.enterAnEmail")),
      // Invited, the user joins the inviting organization and owns none.
      organization: (v) => (invited || v.trim() ? null : t("auth.nameOrganization")),
      password: (v) => (v.length >= MIN_PASSWORD ? null : t("auth.passwordTooShort", { count: MIN_PASSWORD })),
    },
  });
  const signUp = useMutation({
    mutationFn: ({ organization, ...rest }: typeof form.values) =>
      unwrap(api.POST("/api/v1/auth/signup", { body: { ...rest, organization: invited ? null : organization } })),
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
      title={t("auth.createTitle")}
      footer={
        <>
          {t("auth.haveAccount")}{" "}
          <AnchorLink to="/sign-in">{t("auth.signIn")}</AnchorLink>
        </>
      }
    >
      <form onSubmit={form.onSubmit((values) => signUp.mutate(values))} noValidate>
        <Stack>
          {invited && (
            <Alert color="blue" variant="light" data-testid="invited">
              {t("auth.invited", { email: invited })}
            </Alert>
          )}
          <TextInput label={t("auth.yourName")} autoComplete="name" required {...form.getInputProps("name")} />
          <TextInput label={t("auth.email")} type="email" autoComplete="email" required {...form.getInputProps("email")} />
          {!invited && (
            <TextInput
              label={t("auth.organization")}
              description={t("auth.organizationHint")}
              required
              {...form.getInputProps("organization")}
            />
          )}
          <PasswordInput
            label={t("auth.password")}
            description={t("auth.passwordHint", { count: MIN_PASSWORD })}
            autoComplete="new-password"
            required
            {...form.getInputProps("password")}
          />
          {signUp.isError && <ProblemAlert error={signUp.error} title={t("auth.couldNotCreate")} />}
          <Button type="submit" loading={signUp.isPending}>
            {t("auth.createAccount")}
          </Button>
        </Stack>
      </form>
    </AuthFrame>
  );
}

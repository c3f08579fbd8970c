import { Alert, Button, Group, NumberInput, Paper, Stack, Table, Text, Title } from "@mantine/core";
import { useMutation } from "@tanstack/react-query";
import { useState } from "react";
import { api, unwrap } from "../../api/client";
import { gpuHours, shortId } from "../../lib/format";
import { t } from "../../i18n";

/** What a defragmentation plan would move now, what it costs and what it
 * would start, from the what-if: nothing is moved. */
export function DefragmentationPanel() {
  const [budgetHours, setBudgetHours] = useState<number | string>(1);
  const plan = useMutation({
    mutationFn: (hours: number) =>
      unwrap(
        api.POST("/api/v1/admin/what-if", {
          body: { defragment: { budget_gpu_seconds_per_org_hour: hours * 3600 } },
        }),
      ),
  });
  const result = plan.data;
  const defrag = result?.defragmentation;
  return (
    <Paper withBorder p="md" aria-label={t("defrag.title")}>
      <Title order={4}>{t("defrag.title")}</Title>
      <Text size="sm" c="dimmed" mb="sm">
        {t("defrag.subtitle")}
      </Text>
      <Group align="end">
        <NumberInput
          label={t("defrag.budget")}
          min={0}
          step={0.5}
          value={budgetHours}
          onChange={setBudgetHours}
          w={260}
        />
        <Button
          onClick={() => plan.mutate(typeof budgetHours === "number" ? budgetHours : 0)}
          loading={plan.isPending}
        >
          {t("defrag.plan")}
        </Button>
      </Group>
      {plan.isError && (
        <Alert color="red" mt="sm">
          {plan.error.message}
        </Alert>
      )}
      {result && defrag && (
        <Stack mt="md" gap="xs">
          <Text data-testid="defrag-effect">
            {t("defrag.effect", {
              before: result.before.starts,
              after: result.after.starts,
              lost: gpuHours(defrag.lost_gpu_seconds),
            })}
          </Text>
          {defrag.steps.length === 0 ? (
            <Text size="sm" c="dimmed" data-testid="defrag-nothing">
              {defrag.unhelped.length > 0 ? t("defrag.unhelped", { count: defrag.unhelped.length }) : t("defrag.nothing")}
            </Text>
          ) : (
            <Table.ScrollContainer minWidth={640}>
              <Table aria-label={t("defrag.moves")}>
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>{t("defrag.for")}</Table.Th>
                    <Table.Th>{t("defrag.moved")}</Table.Th>
                    <Table.Th>{t("defrag.from")}</Table.Th>
                    <Table.Th>{t("defrag.to")}</Table.Th>
                    <Table.Th>{t("defrag.lost")}</Table.Th>
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {defrag.steps.flatMap((step) =>
                    step.moves.map((move) => (
                      <Table.Tr key={`${step.order_id}-${move.order_id}`}>
                        <Table.Td>{shortId(step.order_id)}</Table.Td>
                        <Table.Td>
                          {shortId(move.order_id)} {move.checkpoint ? t("defrag.checkpoints") : t("defrag.restarts")}
                        </Table.Td>
                        <Table.Td>
                          {move.from_node} [{move.from_gpus.join(", ")}]
                        </Table.Td>
                        <Table.Td>
                          {move.to_node} [{move.to_gpus.join(", ")}]
                        </Table.Td>
                        <Table.Td>{gpuHours(move.lost_gpu_seconds)}</Table.Td>
                      </Table.Tr>
                    )),
                  )}
                </Table.Tbody>
              </Table>
            </Table.ScrollContainer>
          )}
        </Stack>
      )}
    </Paper>
  );
}

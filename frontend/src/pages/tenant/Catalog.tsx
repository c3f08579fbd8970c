import { Badge, Group, Paper, SimpleGrid, Table, Text, Title } from "@mantine/core";
import { useInstanceTypes, useRegions } from "../../api/queries";
import type { Schemas } from "../../api/client";
import { Loadable } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { gpuShape } from "../../lib/capacity";
import { money, words } from "../../lib/format";
import { priceInForce } from "../../lib/pricing";
import { t } from "../../i18n";

const CLASSES: Schemas["PricingClass"][] = ["on_demand", "spot", "reserved"];

export function CatalogPage() {
  const types = useInstanceTypes();
  const regions = useRegions();
  return (
    <>
      <PageHeader title={t("catalog.title")} subtitle={t("catalog.subtitle")} />
      <Loadable query={regions}>
        {(regionList) => (
          <SimpleGrid cols={{ base: 1, sm: 2, lg: 3 }} mb="md">
            {regionList.map((r) => (
              <Paper withBorder p="sm" key={r.id}>
                <Group justify="space-between">
                  <Text fw={600}>{r.display_name}</Text>
                  <Text size="sm" c="dimmed">
                    {r.name}
                  </Text>
                </Group>
                <Text size="sm">{r.time_zone}</Text>
                {r.off_peak && (
                  <Text size="sm" c="dimmed">
                    {t("catalog.offPeak", { from: r.off_peak.start_hour, to: r.off_peak.end_hour, percent: r.off_peak.multiplier_permille / 10 })}
                  </Text>
                )}
                <Group gap={4} mt={4}>
                  {r.compliance_tags.map((t) => (
                    <Badge key={t} size="xs" variant="outline">
                      {t}
                    </Badge>
                  ))}
                </Group>
              </Paper>
            ))}
          </SimpleGrid>
        )}
      </Loadable>
      <Loadable query={types}>
        {(typeList) => (
          <Paper withBorder>
            <Title order={4} p="md" pb={0}>
              {t("catalog.instanceTypes")}
            </Title>
            <Table.ScrollContainer minWidth={900}>
              <Table striped aria-label={t("catalog.tableAria")}>
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>{t("catalog.type")}</Table.Th>
                    <Table.Th>{t("catalog.gpus")}</Table.Th>
                    <Table.Th>{t("catalog.resources")}</Table.Th>
                    <Table.Th>{t("catalog.region")}</Table.Th>
                    {CLASSES.map((c) => (
                      <Table.Th key={c} ta="right">
                        {words(c)}
                      </Table.Th>
                    ))}
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {typeList.flatMap((type) =>
                    [null, ...(regions.data ?? []).map((r) => r.name)]
                      .filter((region) => region === null || type.prices.some((p) => p.region === region))
                      .map((region) => (
                        <Table.Tr key={`${type.id}-${region ?? "all"}`}>
                          <Table.Td fw={600}>{type.name}</Table.Td>
                          <Table.Td>{gpuShape(type)}</Table.Td>
                          <Table.Td>
                            {type.vcpus} / {type.memory_gib} GiB / {type.disk_gib} GiB
                          </Table.Td>
                          <Table.Td>{region ?? t("catalog.allRegions")}</Table.Td>
                          {CLASSES.map((c) => {
                            const price = priceInForce(type.prices, c, region);
                            return (
                              <Table.Td key={c} ta="right">
                                {price ? money(price.hourly_micros) : "—"}
                              </Table.Td>
                            );
                          })}
                        </Table.Tr>
                      )),
                  )}
                </Table.Tbody>
              </Table>
            </Table.ScrollContainer>
          </Paper>
        )}
      </Loadable>
    </>
  );
}

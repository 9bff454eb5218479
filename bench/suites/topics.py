"""What synthetic meetings talk about: names, departments, vendors and twelve meeting topics.

Each topic is a vocabulary (things that cost money, dated events, metrics, counts, choices,
proposals, tasks, small talk); bench/suites/plan.py draws a meeting's facts from it. Pools are
larger than one meeting uses, so the unused entries give plausible questions the meeting cannot
answer ("absent" questions). Everything here is written as espeak-ng should say it: no digits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# First names from many places, all of which Whisper spells in the usual way.
NAMES = (
    "Priya Marcus Diego Fiona Wei Amara Kenji Olga Rahul Sofia Chen Nadia Tom Grace Omar Lucia "
    "Kwame Hannah Ravi Elena Jamal Mei Carlos Ingrid Tariq Aisha Lars Yuki Pedro Zara Ben Chloe "
    "Ahmed Maria Sanjay Emma Jin Fatima Luis Anna Kofi Sarah Hiroshi Leila Ivan Rosa Daniel Mina "
    "Oscar Nina Arjun Julia Samuel Ling Pablo Claire Musa Eva Raj Laura Felix Ada Victor Thandi"
).split()

DEPARTMENTS = ("design", "finance", "engineering", "marketing", "sales", "support", "operations",
               "legal", "the people team", "research", "facilities", "the data team", "product",
               "customer success", "IT", "procurement", "communications", "quality")
AREAS = ("support", "the design team", "our finance team", "operations", "the sales team",
         "the research group", "facilities", "the front desk", "the data team", "quality checks",
         "the web team", "partner relations", "the events team", "recruiting")

# Company names for vendor choices, with the spellings an answer may use.
VENDORS = (
    ("Northwind", "North Wind"), ("Blue Harbor", "Blueharbor", "Blue Harbour"),
    ("Greenfield", "Green Field"), ("Silverline", "Silver Line"), ("Redwood", "Red Wood"),
    ("Summit Works",), ("Brightpath", "Bright Path"), ("Oakridge", "Oak Ridge"),
    ("Clearwater", "Clear Water"), ("Ironbridge", "Iron Bridge"), ("Lakeside", "Lake Side"),
    ("Stonegate", "Stone Gate"), ("Sunrise Partners",), ("Westbrook", "West Brook"),
)


@dataclass(frozen=True)
class Metric:
    """A measured quantity: "the conversion rate" in percent between lo and hi."""
    name: str
    unit: str  # "percent", or a unit word said after the number ("hours", "points")
    lo: float
    hi: float
    decimals: int = 1


@dataclass(frozen=True)
class Count:
    """A counted quantity with its own sentences ({n} is the number in words)."""
    noun: str  # for "who said" questions: "the number of {noun}"
    lo: int
    hi: int
    statements: tuple[str, ...]
    questions: tuple[str, ...]


@dataclass(frozen=True)
class Choice:
    """A decision between options; options are (spoken, *accepted spellings); empty = vendors."""
    subject: str
    options: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class Topic:
    key: str
    titles: tuple[str, ...]
    items: tuple[str, ...]  # things with a cost, without article
    events: tuple[str, ...]  # dated events, without article
    metrics: tuple[Metric, ...]
    counts: tuple[Count, ...]
    choices: tuple[Choice, ...]
    proposals: tuple[str, ...]  # verb phrases: "hire a temporary contractor"
    tasks: tuple[str, ...]  # verb phrases for action items
    fillers: tuple[str, ...] = field(default=())


TOPICS: tuple[Topic, ...] = (
    Topic(
        key="product launch",
        titles=("the launch of our new budgeting app", "the launch of the smart thermostat",
                "getting the new headphones to market", "the launch plan for the travel app"),
        items=("launch party", "press kit", "demo video", "app store ads", "launch website",
               "product photos", "influencer program", "launch webinar"),
        events=("launch", "press preview", "beta release", "final design review", "sales training"),
        metrics=(Metric("conversion rate", "percent", 1.0, 9.9), Metric("beta crash rate", "percent", 0.2, 4.9),
                 Metric("waitlist growth", "percent", 5, 60, 0), Metric("app store rating", "points", 3.1, 4.9)),
        counts=(Count("beta testers", 40, 900,
                      ("We now have {n} beta testers.", "The beta group has grown to {n} people."),
                      ("How many beta testers do they have?", "How big is the beta group?")),
                Count("pre-orders", 120, 4000,
                      ("We have {n} pre-orders so far.", "Pre-orders are at {n} units."),
                      ("How many pre-orders are there?", "How many units have been pre-ordered?"))),
        choices=(Choice("the launch city", (("Chicago",), ("Austin",), ("Denver",), ("Seattle",))),
                 Choice("the packaging supplier"), Choice("the launch color",
                                                           (("blue",), ("green",), ("black",), ("silver",)))),
        proposals=("delay the launch by one week", "offer a free trial month", "hire a temporary contractor",
                   "cut the launch party", "add a student discount", "skip the paper manual"),
        tasks=("send the press release to the journalists", "update the launch checklist",
               "book the photographer", "write the release notes", "test the payment page",
               "call the app store team", "prepare the sales slides", "fix the onboarding screens"),
        fillers=("The early feedback from testers has been very positive.",
                 "People seem to like the new color options a lot.",
                 "I think the message on the landing page is much clearer now.",
                 "Support should be ready for more questions in the first week."),
    ),
    Topic(
        key="hiring",
        titles=("hiring for the new data team", "the open engineering roles",
                "our plan to grow the support team", "hiring a new office manager"),
        items=("recruiting agency", "job ads", "relocation package", "signing bonus", "career fair booth",
               "assessment platform", "training program", "onboarding laptops"),
        events=("first interview round", "final interviews", "start date for the new hires",
                "career fair", "offer deadline"),
        metrics=(Metric("offer acceptance rate", "percent", 40, 95, 0), Metric("time to hire", "days", 18, 70, 0),
                 Metric("candidate pass rate", "percent", 5.0, 35.0), Metric("interview no-show rate", "percent", 2, 20, 0)),
        counts=(Count("applications", 25, 480,
                      ("We received {n} applications for the role.", "So far {n} people have applied."),
                      ("How many applications did they receive?", "How many people applied?")),
                Count("open positions", 2, 14,
                      ("We have {n} open positions right now.", "There are {n} roles still open."),
                      ("How many positions are open?", "How many roles are still open?"))),
        choices=(Choice("the recruiting agency"),
                 Choice("the interview format", (("video calls", "video call", "video"), ("in person", "in-person"),
                                                 ("a take home task", "take home", "take-home")))),
        proposals=("add a second round of interviews", "offer remote work", "raise the starting salary",
                   "use a recruiting agency", "pay a referral bonus", "drop the coding test"),
        tasks=("send the offer letters", "schedule the final interviews", "update the job description",
               "call the references", "prepare the onboarding plan", "post the job ads",
               "order the laptops for the new hires", "review the test results"),
        fillers=("The candidates this time are really strong.", "Two people asked about working part time.",
                 "I liked how prepared the last candidate was.", "We should answer applicants faster."),
    ),
    Topic(
        key="office move",
        titles=("our move to the new office", "moving the team to the second floor",
                "the office move in the spring", "finding a new office for the design studio"),
        items=("moving company", "new furniture", "network cabling", "security deposit", "cleaning service",
               "storage unit", "kitchen equipment", "meeting room screens"),
        events=("move", "lease signing", "furniture delivery", "walkthrough with the landlord", "packing day"),
        metrics=(Metric("desk occupancy", "percent", 35, 95, 0), Metric("commute time increase", "minutes", 3, 25, 0),
                 Metric("rent increase", "percent", 2.0, 15.0)),
        counts=(Count("desks", 12, 140, ("The new floor has {n} desks.", "We will have {n} desks in the new space."),
                      ("How many desks does the new office have?", "How many desks will there be?")),
                Count("boxes", 40, 600, ("We packed {n} boxes so far.", "There are {n} boxes ready to move."),
                      ("How many boxes have been packed?", "How many boxes are ready?"))),
        choices=(Choice("the moving company"),
                 Choice("the new office", (("the building on Main Street", "Main Street"),
                                           ("the space near the station", "near the station", "station"),
                                           ("the old bank building", "bank building")))),
        proposals=("move on a weekend", "buy new chairs", "keep the old storage room",
                   "let people work from home during the move", "hire professional packers", "sell the old desks"),
        tasks=("send the floor plan to everyone", "book the moving company", "label the equipment",
               "cancel the old internet contract", "order the new furniture", "collect the old keys",
               "plan the seating chart", "update our address on the website"),
        fillers=("The new kitchen is a lot bigger than the old one.", "Parking will be easier near the new office.",
                 "Some people are worried about the noise on the new floor.", "The view from the new space is great."),
    ),
    Topic(
        key="budget review",
        titles=("the budget for the second half of the year", "our quarterly budget review",
                "the marketing budget for next year", "the spending review for the support team"),
        items=("cloud hosting", "travel", "software licenses", "team offsite", "contractors", "training courses",
               "new laptops", "office supplies"),
        events=("budget deadline", "board review", "quarter close", "finance sync", "audit"),
        metrics=(Metric("budget utilization", "percent", 40, 98, 0), Metric("cost overrun", "percent", 1.0, 18.0),
                 Metric("gross margin", "percent", 20, 70, 0), Metric("forecast accuracy", "percent", 70, 99, 0)),
        counts=(Count("open invoices", 4, 90, ("We still have {n} open invoices.", "There are {n} invoices waiting for approval."),
                      ("How many invoices are still open?", "How many invoices are waiting?")),
                Count("cost centers", 3, 30, ("We track {n} cost centers now.", "The budget covers {n} cost centers."),
                      ("How many cost centers are there?", "How many cost centers does the budget cover?"))),
        choices=(Choice("the accounting firm"),
                 Choice("the savings plan", (("cutting travel", "travel"), ("freezing hiring", "hiring freeze", "freeze"),
                                             ("moving to cheaper hosting", "hosting")))),
        proposals=("freeze new hiring", "move to a cheaper cloud plan", "cancel the team offsite",
                   "ask for more budget", "pay the vendors early", "switch to yearly licenses"),
        tasks=("update the budget sheet", "send the forecast to the board", "review the software licenses",
               "check the travel expenses", "prepare the savings plan", "approve the open invoices",
               "talk to the bank", "close the old accounts"),
        fillers=("The numbers look better than last quarter.", "Travel went up because of the customer visits.",
                 "We should look at the licenses we do not use.", "Overall we are on track, with a few surprises."),
    ),
    Topic(
        key="incident review",
        titles=("last week's website outage", "the payment failure on Tuesday",
                "the data sync incident", "the login problems over the weekend"),
        items=("customer refunds", "extra servers", "monitoring tool", "outside security review", "backup system",
               "support overtime", "service credits", "load testing"),
        events=("post-mortem", "fix release", "follow-up review", "failover test", "customer call"),
        metrics=(Metric("error rate", "percent", 0.5, 12.0), Metric("uptime", "percent", 97.0, 99.9),
                 Metric("time to recovery", "minutes", 12, 180, 0), Metric("page load time", "seconds", 1.2, 9.5)),
        counts=(Count("affected customers", 30, 5000, ("About {n} customers were affected.", "The outage hit {n} customers."),
                      ("How many customers were affected?", "How many customers did the outage hit?")),
                Count("support tickets", 20, 900, ("We got {n} support tickets about it.", "Support received {n} tickets."),
                      ("How many support tickets came in?", "How many tickets did support get?"))),
        choices=(Choice("the monitoring vendor"),
                 Choice("the fix", (("rolling back the update", "roll back", "rollback", "rolling back"),
                                    ("adding more servers", "more servers"), ("rewriting the cache", "cache")))),
        proposals=("roll back the last update", "add a second database", "freeze all releases for a week",
                   "send an apology email to customers", "hire an outside auditor", "turn off the new feature"),
        tasks=("write the incident report", "add alerts for the database", "update the status page",
               "call the biggest customers", "test the backups", "fix the retry logic",
               "review the deploy process", "send the summary to leadership"),
        fillers=("The good news is that no data was lost.", "The alerts fired, but nobody saw them at night.",
                 "Customers were mostly patient with us.", "We should practice this kind of failure more often."),
    ),
    Topic(
        key="marketing campaign",
        titles=("the summer marketing campaign", "our campaign for the new coffee blend",
                "the back to school campaign", "the holiday email campaign"),
        items=("radio ads", "social media ads", "billboards", "video shoot", "email tool", "street team",
               "printed flyers", "podcast sponsorship"),
        events=("campaign kickoff", "video shoot", "email send", "campaign review", "billboard launch"),
        metrics=(Metric("click through rate", "percent", 0.5, 8.0), Metric("email open rate", "percent", 12, 55, 0),
                 Metric("cost per lead", "dollars", 3, 90, 0), Metric("brand awareness", "percent", 10, 60, 0)),
        counts=(Count("new followers", 200, 20000, ("We gained {n} new followers.", "The account got {n} new followers."),
                      ("How many new followers did they gain?", "How many followers did the account get?")),
                Count("leads", 50, 3000, ("The campaign brought in {n} leads.", "We collected {n} leads so far."),
                      ("How many leads came in?", "How many leads has the campaign collected?"))),
        choices=(Choice("the ad agency"),
                 Choice("the main channel", (("video", "videos"), ("radio",), ("email", "emails"),
                                             ("social media", "social")))),
        proposals=("extend the campaign by two weeks", "cut the radio ads", "hire a famous voice actor",
                   "run a giveaway", "translate the ads into Spanish", "double the email budget"),
        tasks=("send the final ad copy", "book the video crew", "update the landing page", "write the email series",
               "order the printed flyers", "report the weekly numbers", "brief the agency", "check the ad budget"),
        fillers=("People really liked the funny version of the ad.", "The new logo looks great on the posters.",
                 "Our competitors started a similar campaign last month.", "Weekend posts seem to get more likes."),
    ),
    Topic(
        key="research project",
        titles=("the soil study in the north fields", "our research project on battery life",
                "the sleep study with the university", "the water quality project"),
        items=("lab equipment", "field trip", "survey panel", "sensor kits", "data storage", "conference trip",
               "student assistants", "lab tests"),
        events=("field work", "paper deadline", "lab visit", "ethics review", "results workshop"),
        metrics=(Metric("response rate", "percent", 15, 80, 0), Metric("measurement error", "percent", 0.5, 9.0),
                 Metric("battery life", "hours", 6, 48, 0), Metric("sample quality score", "points", 2.1, 9.8)),
        counts=(Count("participants", 20, 600, ("We have {n} participants signed up.", "The study now has {n} participants."),
                      ("How many participants are in the study?", "How many people signed up for the study?")),
                Count("samples", 30, 900, ("We collected {n} samples.", "The lab has processed {n} samples."),
                      ("How many samples were collected?", "How many samples has the lab processed?"))),
        choices=(Choice("the lab partner"),
                 Choice("the study site", (("the north fields", "north"), ("the river site", "river"),
                                           ("the city park", "park")))),
        proposals=("extend the study by a month", "add a second survey", "publish the data openly",
                   "buy a new microscope", "hire another student", "drop the smallest site"),
        tasks=("write the methods section", "send the samples to the lab", "clean the survey data",
               "book the field van", "apply for the grant extension", "update the consent forms",
               "calibrate the sensors", "draft the poster"),
        fillers=("The first results look promising.", "The weather made the field work harder this month.",
                 "The new sensors are much more reliable.", "I think our reviewers will like the approach."),
    ),
    Topic(
        key="school event",
        titles=("the spring science fair", "the school sports day", "the end of year concert",
                "the parents' evening"),
        items=("sound system", "snacks and drinks", "prizes", "bus rental", "decorations", "printed programs",
               "first aid team", "stage lights"),
        events=("science fair", "rehearsal", "sports day", "parents' evening", "setup day"),
        metrics=(Metric("parent turnout", "percent", 30, 90, 0), Metric("ticket sales growth", "percent", 2, 40, 0),
                 Metric("volunteer sign up rate", "percent", 10, 70, 0)),
        counts=(Count("students", 40, 700, ("{n} students signed up to take part.", "We expect {n} students."),
                      ("How many students signed up?", "How many students are expected?")),
                Count("volunteers", 5, 60, ("We have {n} parent volunteers.", "{n} volunteers offered to help."),
                      ("How many volunteers do they have?", "How many volunteers offered to help?"))),
        choices=(Choice("the venue", (("the gym", "gym"), ("the main hall", "main hall", "hall"),
                                      ("the sports field", "sports field", "field"))),
                 Choice("the caterer")),
        proposals=("sell tickets online", "invite the local newspaper", "move the event indoors",
                   "start an hour earlier", "ask parents to bake", "give every child a medal"),
        tasks=("send the letter to parents", "book the buses", "print the programs", "order the prizes",
               "set up the chairs", "ask the local bakery for snacks", "make the schedule", "test the microphones"),
        fillers=("The children are very excited about it.", "Last year the weather was a problem.",
                 "The teachers have been very helpful.", "We could use a few more volunteers on the day."),
    ),
    Topic(
        key="conference planning",
        titles=("our annual customer conference", "the developer conference in the autumn",
                "the partner summit", "the regional sales conference"),
        items=("venue rental", "catering", "speaker fees", "live stream", "conference app", "name badges",
               "evening reception", "hotel block"),
        events=("call for speakers deadline", "early bird deadline", "speaker rehearsal", "conference", "site visit"),
        metrics=(Metric("registration growth", "percent", 3, 45, 0), Metric("sponsor renewal rate", "percent", 40, 95, 0),
                 Metric("attendee satisfaction", "points", 3.2, 4.9)),
        counts=(Count("registrations", 80, 3000, ("We have {n} registrations so far.", "Registration is at {n} people."),
                      ("How many people have registered?", "How many registrations are there?")),
                Count("speakers", 6, 60, ("We confirmed {n} speakers.", "There are {n} speakers on the program."),
                      ("How many speakers are confirmed?", "How many speakers are on the program?"))),
        choices=(Choice("the event agency"),
                 Choice("the host city", (("Lisbon",), ("Toronto",), ("Berlin",), ("Singapore",)))),
        proposals=("add a second day", "offer free tickets to students", "record all the talks",
                   "drop the printed program", "move the reception outside", "invite a celebrity speaker"),
        tasks=("send the speaker contracts", "book the hotel rooms", "design the badges", "confirm the catering menu",
               "publish the agenda", "test the live stream", "email the sponsors", "plan the room layout"),
        fillers=("The feedback from last year was mostly about the food.", "Sponsors are asking about booth sizes.",
                 "The keynote speaker is very popular right now.", "Wifi was a problem last time, so we should test it."),
    ),
    Topic(
        key="website redesign",
        titles=("the redesign of our company website", "the new online store", "the help center redesign",
                "moving the website to a new platform"),
        items=("design agency", "stock photos", "new hosting plan", "accessibility audit", "translation service",
               "user testing", "search tool", "content writing"),
        events=("design review", "soft launch", "content freeze", "user testing day", "go live date"),
        metrics=(Metric("bounce rate", "percent", 20, 75, 0), Metric("mobile traffic share", "percent", 30, 85, 0),
                 Metric("checkout completion rate", "percent", 20.0, 80.0), Metric("page speed score", "points", 40, 99, 0)),
        counts=(Count("pages", 30, 800, ("The old site has {n} pages.", "We need to move {n} pages."),
                      ("How many pages does the old site have?", "How many pages need to move?")),
                Count("broken links", 10, 400, ("We found {n} broken links.", "The audit found {n} broken links."),
                      ("How many broken links were found?", "How many broken links did the audit find?"))),
        choices=(Choice("the design agency"),
                 Choice("the platform", (("WordPress", "Word Press"), ("Shopify",), ("a custom build", "custom")))),
        proposals=("launch the mobile version first", "remove the blog", "add a chat window",
                   "keep the old login page", "translate the site into French", "run a public beta"),
        tasks=("write the new home page text", "fix the broken links", "test the checkout on phones",
               "send the design to legal", "move the old blog posts", "set up the redirects",
               "pick the stock photos", "train the support team on the new site"),
        fillers=("The new design feels much lighter.", "Customers kept asking for a better search.",
                 "The old site was very slow on phones.", "Our colors look better on the new layout."),
    ),
    Topic(
        key="customer support review",
        titles=("the monthly support review", "how we handle customer complaints",
                "the new support hours", "the support team's plan for the busy season"),
        items=("chat software", "weekend coverage", "training videos", "phone system", "help articles",
               "outsourced night shift", "customer gifts", "quality tool"),
        events=("start of the new support hours", "team training", "busy season review", "phone system switch",
                "customer survey"),
        metrics=(Metric("first response time", "hours", 0.5, 9.5), Metric("customer satisfaction", "percent", 60, 98, 0),
                 Metric("ticket backlog growth", "percent", 2, 40, 0), Metric("resolution rate", "percent", 50.0, 95.0)),
        counts=(Count("tickets", 150, 9000, ("We handled {n} tickets last month.", "The team closed {n} tickets."),
                      ("How many tickets did they handle?", "How many tickets were closed?")),
                Count("support agents", 3, 45, ("We have {n} support agents.", "The team is {n} agents right now."),
                      ("How many support agents are there?", "How big is the support team?"))),
        choices=(Choice("the chat software vendor"),
                 Choice("the new support hours", (("eight to eight", "8 to 8"), ("seven to seven", "7 to 7"),
                                                  ("around the clock", "24 hours", "twenty four hours")))),
        proposals=("open support on Sundays", "add a phone line", "hire two more agents", "close the email channel",
                   "send a survey after every ticket", "use a chat bot at night"),
        tasks=("update the help articles", "train the new agents", "send the survey", "fix the ticket tags",
               "review the angry tickets", "write the weekend schedule", "call the unhappy customers",
               "set up the new phone menu"),
        fillers=("Most complaints were about late deliveries.", "The team has been under a lot of pressure.",
                 "Customers like the new chat window.", "Mondays are always the busiest day."),
    ),
    Topic(
        key="charity fundraiser",
        titles=("the charity run for the children's hospital", "our food bank fundraiser",
                "the charity auction in the autumn", "the winter coat drive"),
        items=("venue", "t-shirts", "advertising", "insurance", "auction software", "sound system", "printing",
               "volunteer lunches"),
        events=("charity run", "auction", "volunteer briefing", "donation deadline", "thank you dinner"),
        metrics=(Metric("donor retention", "percent", 30, 80, 0), Metric("fundraising goal progress", "percent", 20, 95, 0),
                 Metric("average gift growth", "percent", 2.0, 25.0)),
        counts=(Count("runners", 50, 1500, ("{n} runners have signed up.", "We have {n} people registered to run."),
                      ("How many runners signed up?", "How many people registered to run?")),
                Count("donors", 30, 2500, ("We have {n} donors so far.", "{n} people have donated."),
                      ("How many donors are there?", "How many people have donated?"))),
        choices=(Choice("the printing company"),
                 Choice("the route", (("the river path", "river"), ("the park loop", "park"),
                                      ("the old town", "old town")))),
        proposals=("add a kids race", "ask local shops for prizes", "sell tickets at the door",
                   "print a donor wall", "move the date to the spring", "offer a matching gift"),
        tasks=("send the thank you letters", "book the park", "order the t-shirts", "call the local radio",
               "update the donation page", "train the volunteers", "collect the auction items",
               "write the social media posts"),
        fillers=("The community response has been amazing.", "Last year we raised more than we expected.",
                 "Several local shops want to help this time.", "The volunteers are really motivated."),
    ),
)
